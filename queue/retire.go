package queue

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	limit := max(retireWait, 2*quiet)
	start := time.Now()
	beat := start
	for {
		info, err := cons.Info(ctx)
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil // another worker retired it
		}
		if err != nil {
			resume()
			return fmt.Errorf("%s: %w", at, err)
		}
		if info.NumAckPending == 0 || time.Since(beat) >= quiet {
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
