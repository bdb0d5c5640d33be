package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"github.com/pmjail/pmjail/api"
)

// DefaultSocketPath is where a daemon listens unless its config says
// otherwise.
const DefaultSocketPath = "/run/pmjail/pmjail.sock"

// maxEventBytes caps one line of a stream: a result carries at most the
// output limits the daemon's ceiling allows, plus logs.
const maxEventBytes = 512 << 20

// maxBodyBytes caps a non-streamed answer for the same reason.
const maxBodyBytes = 512 << 20

// Client talks to one daemon. It is safe for concurrent use.
type Client struct {
	http   *http.Client
	socket string
}

// New returns a client of the daemon listening on socketPath.
func New(socketPath string) *Client {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socketPath)
		},
		MaxIdleConns:        64,
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     30 * time.Second,
	}
	return &Client{http: &http.Client{Transport: tr}, socket: socketPath}
}

// WithTransport returns a client of the same daemon whose requests go
// through wrap(this client's transport): middleware such as a test's
// check of every exchange against the API's OpenAPI document.
func (c *Client) WithTransport(wrap func(http.RoundTripper) http.RoundTripper) *Client {
	return &Client{http: &http.Client{Transport: wrap(c.http.Transport)}, socket: c.socket}
}

// Close drops the idle connections.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
}

// The host part of every URL; the transport ignores it.
const base = "http://pmjail"

// Run sends the job and waits for its result. A result whatever its status
// (a timeout, an error in the guest) is not an error; a refusal by the
// daemon is an *Error. Cancelling ctx cancels the run.
func (c *Client) Run(ctx context.Context, req *api.Job) (*api.Result, error) {
	resp, err := c.post(ctx, req, "application/json")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var res api.Result
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(&res); err != nil {
		return nil, fmt.Errorf("read result: %w", err)
	}
	return &res, nil
}

// Stream sends the job and calls fn with each event as it arrives (output
// chunks, logs, and last the result), then returns the result.
func (c *Client) Stream(ctx context.Context, req *api.Job, fn func(api.Event)) (*api.Result, error) {
	resp, err := c.post(ctx, req, api.NDJSON)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readEvents(resp.Body, fn)
}

// readEvents reads NDJSON events up to the result, calling fn with each.
func readEvents(body io.Reader, fn func(api.Event)) (*api.Result, error) {
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), maxEventBytes)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("read event: %w", err)
		}
		if fn != nil {
			fn(ev)
		}
		if ev.Type == api.EventResult {
			if ev.Result == nil {
				return nil, errors.New("read event: result event without a result")
			}
			return ev.Result, nil
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read events: %w", err)
	}
	return nil, errors.New("read events: the stream ended before the result")
}

// Posture returns the daemon's host posture (as `pmjail posture --json`).
func (c *Client) Posture(ctx context.Context) (*api.Posture, error) {
	body, err := c.get(ctx, "/"+APIVersion+"/posture")
	if err != nil {
		return nil, err
	}
	var p api.Posture
	if err := json.Unmarshal(body, &p); err != nil {
		return nil, fmt.Errorf("read posture: %w", err)
	}
	return &p, nil
}

// Health returns the daemon's health. A draining daemon answers 503,
// returned as an *Error.
func (c *Client) Health(ctx context.Context) (*api.Health, error) {
	body, err := c.get(ctx, "/"+APIVersion+"/health")
	if err != nil {
		return nil, err
	}
	var h api.Health
	if err := json.Unmarshal(body, &h); err != nil {
		return nil, fmt.Errorf("read health: %w", err)
	}
	return &h, nil
}

// Metrics returns the daemon's Prometheus metrics as text.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	body, err := c.get(ctx, "/metrics")
	return string(body), err
}

func (c *Client) post(ctx context.Context, req *api.Job, accept string) (*http.Response, error) {
	hreq, err := newPost(ctx, "/"+APIVersion+"/runs", "job", req)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", accept)
	return c.do(hreq)
}

// newPost is a POST of v as JSON to path; what names v in an encoding
// error.
func newPost(ctx context.Context, path, what string, v any) (*http.Request, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", what, err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, base+path, bytes.NewReader(data))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	return hreq, nil
}

func (c *Client) get(ctx context.Context, path string) ([]byte, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return body, nil
}

// dialFailure says why the daemon's socket could not be reached, with what
// to check, or returns nil if err is not a failed connection. The socket is
// the first thing a new user gets wrong (the daemon not running, another
// --socket, not in the socket's group), and net/http's own account of it
// names a URL that exists nowhere.
func (c *Client) dialFailure(err error) error {
	opErr, ok := errors.AsType[*net.OpError](err)
	if !ok || opErr.Op != "dial" {
		return nil
	}
	errno, ok := errors.AsType[syscall.Errno](opErr.Err)
	if !ok {
		return nil
	}
	hint := ""
	switch errno {
	case syscall.ENOENT, syscall.ECONNREFUSED:
		hint = " (is pmjail serve running, and listening there? --socket names another socket)"
	case syscall.EACCES:
		hint = " (the socket's owner, group and mode, set in the daemon's config, say who may connect)"
	}
	return fmt.Errorf("no connection to the daemon at %s: %w%s", c.socket, errno, hint)
}

// do sends the request and turns a non-2xx answer into an *Error.
func (c *Client) do(hreq *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(hreq)
	if err != nil {
		if err := c.dialFailure(err); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%s %s: %w", hreq.Method, hreq.URL.Path, err)
	}
	if resp.StatusCode/100 == 2 {
		return resp, nil
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var retry time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s > 0 {
		retry = time.Duration(s) * time.Second
	}
	return nil, decodeError(resp.StatusCode, body, retry)
}
