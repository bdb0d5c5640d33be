package queue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// Client submits jobs to the stream and waits on their results, as
// `pmjail submit --nats` does. It is safe for concurrent use.
type Client struct {
	cfg Config
	nc  *nats.Conn
	js  jetstream.JetStream
	kv  jetstream.KeyValue
}

// Dial connects to the servers of cfg, of which it reads the URLs, the
// credentials, the stream, the subject and the bucket (empty ones take
// the defaults of Config).
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	// A client's config is the worker's less the worker's own settings.
	if err := cfg.Check(1); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	var err error
	if c.nc, err = connect(&cfg, "pmjail submit"); err != nil {
		return nil, err
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		c.nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	if c.kv, err = c.js.KeyValue(ctx, cfg.Bucket); err != nil {
		c.nc.Close()
		return nil, fmt.Errorf("result bucket %s: %w", cfg.Bucket, err)
	}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// NewID is a fresh job id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Submit publishes the job for tenant under id, and returns once the
// stream holds it. The same id sent again within the stream's duplicate
// window is stored once; after it, a worker finds the first one's result
// and does not run it again.
func (c *Client) Submit(ctx context.Context, tenant, id string, job *api.Job) error {
	if err := CheckTenant(tenant); err != nil {
		return err
	}
	if err := CheckID(id); err != nil {
		return err
	}
	data, err := json.Marshal(job)
	if err != nil {
		return fmt.Errorf("encode job: %w", err)
	}
	msg := &nats.Msg{Subject: c.cfg.Subject + "." + tenant, Header: nats.Header{HeaderID: []string{id}}, Data: data}
	if _, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(Key(tenant, id)), jetstream.WithExpectStream(c.cfg.Stream)); err != nil {
		return fmt.Errorf("submit job %s: %w", id, err)
	}
	return nil
}

// Wait waits for the result of tenant's job id, however long ago it was
// stored, until ctx ends.
func (c *Client) Wait(ctx context.Context, tenant, id string) (*api.Result, error) {
	w, err := c.kv.Watch(ctx, Key(tenant, id), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("watch result %s: %w", id, err)
	}
	defer func() { _ = w.Stop() }()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait for result %s: %w", id, context.Cause(ctx))
		case e, ok := <-w.Updates():
			if !ok {
				return nil, fmt.Errorf("wait for result %s: the watch ended", id)
			}
			if e == nil {
				continue // the end of what was stored: the result is to come
			}
			var res api.Result
			if err := json.Unmarshal(e.Value(), &res); err != nil {
				return nil, fmt.Errorf("result %s: %w", id, err)
			}
			return &res, nil
		}
	}
}

// Run submits the job for tenant under a fresh id and waits for its
// result.
func (c *Client) Run(ctx context.Context, tenant string, job *api.Job) (*api.Result, error) {
	id := NewID()
	if err := c.Submit(ctx, tenant, id, job); err != nil {
		return nil, err
	}
	return c.Wait(ctx, tenant, id)
}

// ErrNoResult is Get's answer for a job with no stored result.
var ErrNoResult = errors.New("no result stored")

// Get returns the stored result of tenant's job id, or ErrNoResult.
func (c *Client) Get(ctx context.Context, tenant, id string) (*api.Result, error) {
	e, err := c.kv.Get(ctx, Key(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, fmt.Errorf("job %s: %w", id, ErrNoResult)
	}
	if err != nil {
		return nil, fmt.Errorf("job %s: %w", id, err)
	}
	var res api.Result
	if err := json.Unmarshal(e.Value(), &res); err != nil {
		return nil, fmt.Errorf("result %s: %w", id, err)
	}
	return &res, nil
}
