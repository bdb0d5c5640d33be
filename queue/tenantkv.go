package queue

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// tenantKV is what a client does with a key-value bucket: read a key by
// a direct get, and create one by a publish on its subject, which are
// what a tenant's permissions allow, for its own keys
// (deploy/queue/nats-server.conf). It is not a jetstream.KeyValue:
// binding one asks for the bucket's stream info, and a user allowed to
// ask may ask with a subjects filter, which lists every key of the
// bucket: every tenant's job ids.
type tenantKV struct {
	nc    *nats.Conn
	js    jetstream.JetStream
	name  string // the bucket's
	field string // its key in the config, for errors
}

// ErrNoBucket is a client's error for a bucket that is not there (or
// that no node holding it answers).
var ErrNoBucket = errors.New("no such bucket (docs/queue.md says how to make it)")

// missing is ErrNoBucket, naming the config's key and the bucket first,
// as a submit's flag errors are found (asSubmitFlags).
func (b *tenantKV) missing() error {
	return fmt.Errorf("queue.nats.%s: %s: %w", b.field, b.name, ErrNoBucket)
}

// get is the value of key, or jetstream.ErrKeyNotFound (also for a key
// deleted or purged).
func (b *tenantKV) get(ctx context.Context, key string) ([]byte, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, opTimeout)
		defer cancel()
	}
	subject := "$JS.API.DIRECT.GET." + bucketStream(b.name) + ".$KV." + b.name + "." + key
	m, err := b.nc.RequestWithContext(ctx, subject, nil)
	if errors.Is(err, nats.ErrNoResponders) {
		return nil, b.missing()
	}
	if err != nil {
		return nil, refusedBy(b.nc, err, subject)
	}
	switch status := m.Header.Get("Status"); status {
	case "":
	case "404":
		return nil, jetstream.ErrKeyNotFound
	default:
		return nil, fmt.Errorf("direct get of %s: %s %s", key, status, m.Header.Get("Description"))
	}
	switch m.Header.Get("KV-Operation") {
	case "DEL", "PURGE":
		return nil, jetstream.ErrKeyNotFound
	}
	return m.Data, nil
}

// create stores value under key if the key has none, or is
// jetstream.ErrKeyExists.
func (b *tenantKV) create(ctx context.Context, key string, value []byte) error {
	// One request's time: past it, a refusal by the server is told.
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	subject := "$KV." + b.name + "." + key
	_, err := b.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: value},
		jetstream.WithExpectLastSequencePerSubject(0), jetstream.WithExpectStream(bucketStream(b.name)))
	var apiErr *jetstream.APIError
	switch {
	case errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence ||
		apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant):
		return jetstream.ErrKeyExists
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		return b.missing()
	}
	return refusedBy(b.nc, err, subject)
}

// refusedBy is err, or, when err is a request's time running out after
// the server refused the user a publish on subject, that refusal: the
// server sends it apart from any reply, and the connection keeps it as
// its last error, so the request waits for a reply that never comes.
func refusedBy(nc *nats.Conn, err error, subject string) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, nats.ErrTimeout) {
		return err
	}
	if last := nc.LastError(); errors.Is(last, nats.ErrPermissionViolation) && strings.Contains(last.Error(), `"`+subject+`"`) {
		return last
	}
	return err
}
