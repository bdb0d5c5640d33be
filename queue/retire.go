package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// retireShared deletes the consumer named by the config, the one all
// workers of older versions shared, whose filter (every tenant's
// subject) a work-queue stream would not let overlap the tenants'
// consumers. A job it handed out to a worker still running it would be
// handed out again by its tenant's consumer, and run twice: so it is
// paused first (it hands out no more jobs), and deleted once no job it
// handed out is held, which is when none is pending an ack, or when
// a whole ack wait (the consumer's, plus a second) passed without an
// in-progress ack on it: a live worker sends one every third of the
// ack wait for each job it runs. The jobs still pending then were sent
// back, or held by a worker that is gone, and go to the tenants'
// consumers. Held longer than retireWait (or two such ack waits), the
// consumer is resumed, for the older workers to go on, and an error
// returned: the worker tries again later.
func (w *Worker) retireShared(ctx context.Context) error {
	name := w.cfg.Consumer
	cons, err := w.js.Consumer(ctx, w.cfg.Stream, name)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return nil
	case err != nil:
		return fmt.Errorf("queue.nats.consumer: %s on stream %s: %w", name, w.cfg.Stream, err)
	}
	at := fmt.Sprintf("queue.nats.consumer: %s, the consumer all workers of older versions shared", name)
	// The in-progress acks come on its ack subjects: watched before the
	// pause, so that none sent after it is missed.
	acks, err := w.nc.SubscribeSync(fmt.Sprintf("$JS.ACK.%s.%s.>", w.cfg.Stream, name))
	if err != nil {
		return fmt.Errorf("%s: watching its acks: %w", at, err)
	}
	defer func() { _ = acks.Unsubscribe() }()
	if err := w.nc.FlushTimeout(opTimeout); err != nil {
		return fmt.Errorf("%s: watching its acks: %w", at, err)
	}
	// Paused for a lease renewed while the worker waits: one that dies
	// meanwhile leaves the older workers without jobs no longer.
	paused := time.Now()
	if _, err := w.js.PauseConsumer(ctx, w.cfg.Stream, name, paused.Add(retireLease)); err != nil {
		return fmt.Errorf("%s: pausing it: %w", at, err)
	}
	resume := func() { _, _ = w.js.ResumeConsumer(context.Background(), w.cfg.Stream, name) }
	quiet := cons.CachedInfo().Config.AckWait + time.Second
	maxDeliver := cons.CachedInfo().Config.MaxDeliver
	limit := max(retireWait, 2*quiet)
	start := time.Now()
	beat := start
	// The deliveries of the jobs its workers acked, sent back or said
	// they still run meanwhile, by stream sequence, from their ack
	// subjects.
	seen := map[uint64]ackSeen{}
	for {
		info, err := cons.Info(ctx)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil // another worker retired it
		}
		if err != nil {
			resume()
			return fmt.Errorf("%s: %w", at, err)
		}
		if retireRead != nil {
			retireRead(info)
		}
		// On a cluster the pause is answered once the meta layer has it
		// proposed: until the consumer's leader has applied it (its info
		// says paused), it still hands out jobs, which a count of the
		// jobs held read meanwhile misses.
		if info.Paused && (info.NumAckPending == 0 || time.Since(beat) >= quiet) {
			err := w.recordRetirement(ctx, cons, info, seen)
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil // another worker retired it
			}
			if err != nil {
				resume()
				return fmt.Errorf("%s: recording the deliveries it counted: %w", at, err)
			}
			if retireRecorded != nil {
				retireRecorded()
			}
			if err := w.js.DeleteConsumer(ctx, w.cfg.Stream, name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
				resume()
				return fmt.Errorf("%s: deleting it: %w", at, err)
			}
			w.log.Info("queue: the consumer of older workers retired: each tenant's subject has a consumer of its own",
				"consumer", name, "jobs_sent_on", info.NumAckPending)
			return nil
		}
		if time.Since(paused) >= retireLease/3 {
			_, err := w.js.PauseConsumer(ctx, w.cfg.Stream, name, time.Now().Add(retireLease))
			if errors.Is(err, jetstream.ErrConsumerNotFound) {
				return nil // another worker retired it
			}
			if err != nil {
				resume()
				return fmt.Errorf("%s: pausing it: %w", at, err)
			}
			paused = time.Now()
		}
		if time.Since(start) >= limit {
			resume()
			return fmt.Errorf("%s, still has %d jobs run by a live worker after %v: stop the older workers (each sends its jobs back as it stops)",
				at, info.NumAckPending, limit)
		}
		msg, err := acks.NextMsg(100 * time.Millisecond)
		switch {
		case err == nil:
			if bytes.HasPrefix(msg.Data, []byte("+WPI")) {
				beat = time.Now()
			}
			if seq, dc, ok := ackDelivery(msg.Subject); ok {
				// A job sent back at once stays pending while the
				// consumer is paused: it is given up on only as it would
				// be handed out again. One sent back for later, at its
				// last delivery, may be given up on when its delay ends.
				nak := bytes.Equal(msg.Data, []byte("-NAK")) ||
					bytes.HasPrefix(msg.Data, []byte("-NAK")) && (maxDeliver <= 0 || dc < uint64(maxDeliver))
				seen[seq] = ackSeen{dc: dc, pending: nak}
			}
		case errors.Is(err, nats.ErrTimeout):
		default:
			// Not allowed to watch them (a permission refused): no word
			// of a live worker can be trusted to be missing.
			resume()
			return fmt.Errorf("%s: watching its acks: %w (allow the workers' user to subscribe to $JS.ACK.%s.>)", at, err, w.cfg.Stream)
		}
		if ctx.Err() != nil {
			resume()
			return fmt.Errorf("%s: %w", at, ctx.Err())
		}
	}
}

// retireRead, if set (by a test), is called with each info the
// retirement reads of the older consumer, before it acts on it.
var retireRead func(*jetstream.ConsumerInfo)

// retireRecorded, if set (by a test), is called once the retirement
// recorded what the older consumer counted, before it deletes it.
var retireRecorded func()

// ackDelivery reads the stream sequence and the delivery count of a job
// from the subject of its ack, $JS.ACK.<stream>.<consumer>.<delivered>.<stream
// seq>.<consumer seq>.<time>.<pending>.
func ackDelivery(subject string) (seq, dc uint64, ok bool) {
	toks := strings.Split(subject, ".")
	if len(toks) != 9 {
		return 0, 0, false
	}
	dc, err1 := strconv.ParseUint(toks[4], 10, 64)
	seq, err2 := strconv.ParseUint(toks[5], 10, 64)
	return seq, dc, err1 == nil && err2 == nil && dc > 0
}

// ackSeen is what the acks of a job said: its delivery, and whether it
// was sent back so that it stays pending on the paused consumer.
type ackSeen struct {
	dc      uint64
	pending bool
}

// retiredKey is the key of the bucket under which the workers that
// retired the consumer of older workers left what it had counted: no
// tenant's key, whose first token is a tenant name (CheckTenant takes no
// '=').
func retiredKey(consumer string) string { return "=retired." + consumer }

// retirement is what the consumer of older workers had counted of the
// jobs it handed out, left in the bucket for every worker once it is
// deleted: the tenants' consumers count their deliveries from one, so a
// job's deliveries in all are its older ones plus theirs.
type retirement struct {
	// Stream and StreamCreated name the stream the older consumer was
	// of: one deleted and made again starts its sequences again at 1,
	// and none of its jobs is the record's (stillOfStream).
	Stream        string    `json:"stream"`
	StreamCreated time.Time `json:"stream_created"`
	// ConsumerCreated is when the older consumer was made: the workers
	// that retire it together (each pauses it, and each records what it
	// counted before it deletes it) make one retirement of it, merged
	// (merge), not one each, which would count its deliveries once per
	// worker.
	ConsumerCreated time.Time `json:"consumer_created"`
	// MaxDeliver is the older consumer's bound.
	MaxDeliver int `json:"max_deliver"`
	// Delivered is the last stream sequence it handed out: a job after
	// it was never handed out by it.
	Delivered uint64 `json:"delivered"`
	// GivenUp are the jobs still in the stream that it handed out
	// MaxDeliver times and gave up on.
	GivenUp []uint64 `json:"given_up,omitempty"`
	// Seen are the deliveries of the jobs still in the stream that the
	// retiring worker saw on their acks (sent back, or said to be still
	// running, while it waited), by stream sequence. Any other job up to
	// Delivered was handed out at least once: the server tells no more.
	Seen map[uint64]uint64 `json:"seen,omitempty"`
}

// used is how often the older consumer of r handed out the job of
// stream sequence seq.
func (r *retirement) used(seq uint64) uint64 {
	switch {
	case seq > r.Delivered:
		return 0
	case r.Seen[seq] > 0:
		return r.Seen[seq]
	}
	if _, found := slices.BinarySearch(r.GivenUp, seq); found && r.MaxDeliver > 0 {
		return uint64(r.MaxDeliver)
	}
	return 1
}

// recordRetirement adds what the older consumer (info, once paused and
// no job of it held by a live worker) counted to the bucket's record,
// before it is deleted: a worker that then finds it gone reads it. The
// jobs it handed out still in the stream are pending on it (sent back,
// or held by a worker that died) or given up; which is which the server
// does not say of each, only how many are pending: once the acks seen
// name as many jobs sent back (which stay pending while it is paused),
// every other one was given up (or is acked, and leaving the stream).
func (w *Worker) recordRetirement(ctx context.Context, cons jetstream.Consumer, info *jetstream.ConsumerInfo, seen map[uint64]ackSeen) error {
	r := retirement{MaxDeliver: info.Config.MaxDeliver, Delivered: info.Delivered.Stream, ConsumerCreated: info.Created}
	if r.Delivered == 0 {
		return nil
	}
	sinfo, err := w.stream.Info(ctx)
	if err != nil {
		return err
	}
	r.Stream, r.StreamCreated = sinfo.Config.Name, sinfo.Created
	// The jobs it handed out still in the stream.
	var left []uint64
	for seq := max(sinfo.State.FirstSeq, 1); seq <= r.Delivered; {
		m, err := w.stream.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(w.cfg.Subject+".*"))
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			break
		}
		if err != nil {
			return fmt.Errorf("reading the jobs it handed out: %w", err)
		}
		if m.Sequence > r.Delivered {
			break
		}
		left = append(left, m.Sequence)
		seq = m.Sequence + 1
	}
	if len(left) == 0 {
		return nil // every job it handed out is gone
	}
	// Its count of jobs pending, read again: one that changed meanwhile
	// (an ack on its way) tells nothing.
	again, err := cons.Info(ctx)
	if err != nil {
		return err
	}
	steady := again.NumAckPending == info.NumAckPending && again.Delivered.Stream == info.Delivered.Stream
	sentBack := 0
	for _, seq := range left {
		if a := seen[seq]; a.dc > 0 {
			if r.Seen == nil {
				r.Seen = map[uint64]uint64{}
			}
			r.Seen[seq] = a.dc
			if a.pending {
				sentBack++
			}
		}
	}
	unknown := 0
	for _, seq := range left {
		switch {
		case seen[seq].dc > 0:
		case steady && sentBack == info.NumAckPending:
			r.GivenUp = append(r.GivenUp, seq)
		default:
			unknown++
		}
	}
	if unknown > 0 {
		w.log.Warn("queue: jobs the consumer of older workers handed out, sent back before this worker watched it "+
			"or held by a worker that died, count one delivery there: the server tells not how many",
			"consumer", w.cfg.Consumer, "jobs", unknown)
	}
	key := retiredKey(w.cfg.Consumer)
	for try := 0; ; try++ {
		var all []retirement
		var rev uint64
		e, err := w.kv.Get(ctx, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			if err := json.Unmarshal(e.Value(), &all); err != nil {
				return fmt.Errorf("key %s: %w", key, err)
			}
			rev = e.Revision()
		}
		if i := slices.IndexFunc(all, r.sameConsumer); i >= 0 {
			all[i].merge(&r)
		} else {
			all = append(all, r)
		}
		data, err := json.Marshal(all)
		if err != nil {
			return err
		}
		if rev == 0 {
			_, err = w.kv.Create(ctx, key, data)
		} else {
			_, err = w.kv.Update(ctx, key, data, rev)
		}
		if err == nil || try >= 5 || !errors.Is(err, jetstream.ErrKeyExists) && !isWrongSequence(err) {
			return err
		}
	}
}

// sameConsumer reports whether o is a retirement of the same older
// consumer as r: of the same stream, made at the same time.
func (r *retirement) sameConsumer(o retirement) bool {
	return r.Stream == o.Stream && r.StreamCreated.Equal(o.StreamCreated) && r.ConsumerCreated.Equal(o.ConsumerCreated)
}

// merge adds to r what another worker that retired the same consumer
// counted: the later delivery of each job seen (its acks name it), and
// the jobs either found given up on.
func (r *retirement) merge(o *retirement) {
	r.Delivered = max(r.Delivered, o.Delivered)
	for seq, dc := range o.Seen {
		if dc > r.Seen[seq] {
			if r.Seen == nil {
				r.Seen = map[uint64]uint64{}
			}
			r.Seen[seq] = dc
		}
	}
	for _, seq := range o.GivenUp {
		if i, found := slices.BinarySearch(r.GivenUp, seq); !found {
			r.GivenUp = slices.Insert(r.GivenUp, i, seq)
		}
	}
}

// isWrongSequence: another worker updated the key first.
func isWrongSequence(err error) bool {
	var apiErr *jetstream.APIError
	return errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence
}

// loadRetired reads the record of the consumers of older workers that
// were retired, if any.
func (w *Worker) loadRetired(ctx context.Context) error {
	e, err := w.kv.Get(ctx, retiredKey(w.cfg.Consumer))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		w.retired.Store(nil)
		return nil
	case err != nil:
		return fmt.Errorf("queue.nats.bucket: %s: reading key %s: %w", w.cfg.Bucket, retiredKey(w.cfg.Consumer), err)
	}
	var all []retirement
	if err := json.Unmarshal(e.Value(), &all); err != nil {
		return fmt.Errorf("queue.nats.bucket: %s: key %s: %w", w.cfg.Bucket, retiredKey(w.cfg.Consumer), err)
	}
	w.retired.Store(&all)
	return nil
}

// olderDeliveries is how often the consumers of older workers handed out
// the job of stream sequence seq, in all.
func (w *Worker) olderDeliveries(seq uint64) uint64 {
	all := w.retired.Load()
	if all == nil {
		return 0
	}
	var n uint64
	for i := range *all {
		n += (*all)[i].used(seq)
	}
	return n
}

// stillOfStream keeps, of the record loaded, the retirements of the
// stream as it is now, which it asks the server: a stream deleted and
// made again since (its sequences start again at 1) has none of the
// jobs the older consumer handed out, and a job of it at the sequence
// of one it gave up on is not to be terminated.
func (w *Worker) stillOfStream(ctx context.Context) error {
	all := w.retired.Load()
	if all == nil {
		return nil
	}
	info, err := w.stream.Info(ctx)
	if err != nil {
		return fmt.Errorf("queue.nats.stream: %s: %w", w.cfg.Stream, err)
	}
	var kept []retirement
	for _, r := range *all {
		if r.Stream == info.Config.Name && r.StreamCreated.Equal(info.Created) {
			kept = append(kept, r)
		}
	}
	if len(kept) == len(*all) {
		return nil
	}
	w.log.Warn("queue: the record of the consumer of older workers is of a stream since made again: left aside",
		"key", retiredKey(w.cfg.Consumer), "stream", w.cfg.Stream, "stream_created", info.Created, "records", len(*all)-len(kept))
	w.retired.CompareAndSwap(all, &kept)
	return nil
}
