package queue

import (
	"errors"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// noticeBuffer is how many notices wait for the scheduler; past it one
// is dropped, and the next free slot looks at the stream instead.
const noticeBuffer = 1024

// NoticeSubject is the subject prefix Provision has the stream republish
// a notice of each job on (its headers only), + "." + the tenant: a
// worker subscribed to it pulls a job as soon as it is stored.
func NoticeSubject(subject string) string { return subject + "-notice" }

// noticeSubscription is the subject to subscribe to for the notices the
// stream's rp republishes of the jobs on subject.*, or "" if it sends
// none for them.
func noticeSubscription(rp *jetstream.RePublish, subject string) string {
	if rp == nil || rp.Destination == "" {
		return ""
	}
	src := rp.Source
	if src == "" {
		src = ">"
	}
	// The source must take every job's subject.
	want := strings.Split(subject+".*", ".")
	toks := strings.Split(src, ".")
	for i, tok := range toks {
		if tok == ">" {
			break
		}
		if i >= len(want) || tok != "*" && tok != want[i] || i == len(toks)-1 && len(toks) != len(want) {
			return ""
		}
	}
	// The destination's mapped tokens ({{wildcard(1)}}) are any token.
	dest := strings.Split(rp.Destination, ".")
	for i, tok := range dest {
		if strings.Contains(tok, "{{") {
			dest[i] = "*"
		}
	}
	return strings.Join(dest, ".")
}

// listen subscribes to the stream's notices of jobs: each names its
// job's subject (header Nats-Subject), whose tenant the scheduler pulls
// from at once. Without them (a stream provisioned without its
// republish) the log says so once, and the worker looks at the stream
// every scanEvery instead.
func (w *Worker) listen() (*nats.Subscription, time.Duration) {
	if w.noticeSubject == "" {
		w.log.Warn("queue: the stream republishes no notice of its jobs: the worker looks at it every 250ms instead "+
			"(add a republish of its subjects' headers, as queue.Provision and docs/queue.md do)",
			"stream", w.cfg.Stream, "republish_destination", NoticeSubject(w.cfg.Subject)+".{{wildcard(1)}}")
		return nil, scanEvery
	}
	sub, err := w.nc.SubscribeSync(w.noticeSubject)
	if err == nil {
		err = w.nc.FlushTimeout(opTimeout)
	}
	if err == nil {
		// A refused subscription is known by the flush's end (the
		// server's error comes before its pong).
		if _, perr := sub.NextMsg(time.Nanosecond); errors.Is(perr, nats.ErrPermissionViolation) {
			err = perr
		}
	}
	if err != nil {
		if sub != nil {
			_ = sub.Unsubscribe()
		}
		w.log.Warn("queue: the stream's notices of jobs not watched: the worker looks at it every 250ms instead "+
			"(allow the workers' user to subscribe to them)", "subject", w.noticeSubject, "err", err)
		return nil, scanEvery
	}
	// A notice dropped for a slow subscriber: the next free slot looks.
	_ = sub.SetPendingLimits(noticeBuffer, 1<<20)
	prefix := w.cfg.Subject + "."
	go func() {
		for {
			m, err := sub.NextMsg(time.Hour)
			switch {
			case errors.Is(err, nats.ErrTimeout):
				continue
			case errors.Is(err, nats.ErrSlowConsumer):
				w.missed.Store(true)
				continue
			case err != nil:
				return // unsubscribed, or the connection closed
			}
			// The server's header comes after the job's own: a publisher
			// may send a Nats-Subject of its choosing.
			subjects := m.Header.Values(jetstream.SubjectHeader)
			if len(subjects) == 0 {
				continue
			}
			tenant, ok := strings.CutPrefix(subjects[len(subjects)-1], prefix)
			if !ok {
				continue
			}
			select {
			case w.notices <- tenant:
			default:
				w.missed.Store(true)
			}
		}
	}()
	return sub, rescanEvery
}

// notice marks the tenant of a job the stream stored as having jobs; a
// tenant new to the worker has it look at the stream.
func (w *Worker) notice(tenant string) {
	l := w.lanes[tenant]
	if l == nil || l.cons == nil {
		w.missed.Store(true)
		return
	}
	l.jobs, l.noticed, l.retried = true, time.Now(), false
}
