package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/pmjail/pmjail/api"
)

// SubmitAsync sends the job as an async run (Prefer: respond-async) and
// returns it queued, without waiting for it: Run's connection-long wait
// becomes GetRun, RunEvents and CancelRun on its id. A non-empty key is
// sent as the Idempotency-Key: the same key and job again return the run
// the first made; another job under it is refused (*Error, 422).
func (c *Client) SubmitAsync(ctx context.Context, req *api.Job, key string) (*api.Run, error) {
	hreq, err := newPost(ctx, "/"+APIVersion+"/runs", "job", req)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Prefer", api.PreferAsync)
	if key != "" {
		hreq.Header.Set(api.IdempotencyKey, key)
	}
	var run api.Run
	return &run, c.decode(hreq, &run)
}

// SubmitBatch sends jobs as one batch of async runs, admitted whole or
// not at all, and returns the runs in the jobs' order.
func (c *Client) SubmitBatch(ctx context.Context, jobs []api.Job) (*api.BatchRuns, error) {
	hreq, err := newPost(ctx, "/"+APIVersion+"/batches", "batch", api.Batch{Jobs: jobs})
	if err != nil {
		return nil, err
	}
	var out api.BatchRuns
	return &out, c.decode(hreq, &out)
}

// GetRun returns an async run: its status, and its result once it ended.
// A run of another owner, or past its retention, is an *Error (404).
func (c *Client) GetRun(ctx context.Context, id string) (*api.Run, error) {
	return c.run(ctx, http.MethodGet, id)
}

// CancelRun cancels an async run not yet ended and returns it as it then
// is (an ended run is returned unchanged).
func (c *Client) CancelRun(ctx context.Context, id string) (*api.Run, error) {
	return c.run(ctx, http.MethodDelete, id)
}

// run sends method to the run id's path and decodes the run answered.
func (c *Client) run(ctx context.Context, method, id string) (*api.Run, error) {
	hreq, err := http.NewRequestWithContext(ctx, method, base+runPath(id), nil)
	if err != nil {
		return nil, err
	}
	var run api.Run
	return &run, c.decode(hreq, &run)
}

// RunEvents reads an async run's events from its start, calling fn with
// each, and following a run not yet ended to its result, which it
// returns. Cancelling ctx stops the reading, not the run.
func (c *Client) RunEvents(ctx context.Context, id string, fn func(api.Event)) (*api.Result, error) {
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, base+runPath(id)+"/events", nil)
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Accept", api.NDJSON)
	resp, err := c.do(hreq)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return readEvents(resp.Body, fn)
}

func runPath(id string) string { return "/" + APIVersion + "/runs/" + url.PathEscape(id) }

// decode sends hreq and decodes its JSON answer into v.
func (c *Client) decode(hreq *http.Request, v any) error {
	resp, err := c.do(hreq)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxBodyBytes)).Decode(v); err != nil {
		return fmt.Errorf("read %s: %w", hreq.URL.Path, err)
	}
	return nil
}
