package queue

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// lane is one tenant's jobs: its subject of the stream and the durable
// consumer of that subject all workers share.
type lane struct {
	tenant string
	cons   jetstream.Consumer
	// jobs: the stream may hold jobs of the tenant not handed out yet.
	jobs bool
	// after is when the tenant's admission may be tried again;
	// forSlot: it was refused for want of a slot, and a slot freed
	// (Executor.Freed) makes it tried at once.
	after   time.Time
	forSlot bool
	// warned: its consumer could not be made, and the log said so.
	warned bool
	// stranger: a tenant the executor has not, or no tenant name.
	stranger bool
	// noticed is when a notice of a job of the tenant came; retried
	// that its pull found none since.
	noticed time.Time
	retried bool
	// drained: a stranger's pull found no job; its consumer is deleted
	// if none is pending or held.
	drained bool
	// foreign: a stranger's consumer that a worker that has the tenant
	// made (or took over): its jobs are left to that worker, and the
	// consumer is neither updated nor deleted.
	foreign bool
	dropAt  time.Time
}

// strangerMark is the metadata key of a consumer a worker made for a
// stranger's subject: no worker that has the tenant uses it (one that
// does updates it to its own config, without the key), so a worker may
// delete it once drained.
const strangerMark = "pmjail_stranger"

// marked reports whether the consumer of cfg is a stranger's.
func marked(cfg jetstream.ConsumerConfig) bool { return cfg.Metadata[strangerMark] != "" }

// ConsumerName is the durable consumer of a tenant's subject: the
// config's consumer, '-', the tenant; a subject token that is no tenant
// name (CheckTenant) is named by its digest after a '=', which no tenant
// has.
func ConsumerName(consumer, tenant string) string {
	if CheckTenant(tenant) == nil && len(tenant) <= 128 {
		return consumer + "-" + tenant
	}
	return consumer + "=" + digest([]byte(tenant))[:32]
}

// schedule retires the consumer of older workers if there is one, then
// fills the worker's slots until ctx ends: for each free one it
// takes the next tenant, round the tenants with jobs, that its executor
// admits now, and pulls one job of that tenant's consumer. A tenant that
// cannot start a job (its rate, its share) is passed over, its jobs left
// in the stream, where waiting costs them none of their deliveries. The
// tenants with jobs are the ones the stream's notices named, and the
// ones a look at the stream finds: at the first free slot, after a
// notice may have been missed, and every `every` while a slot is free.
func (w *Worker) schedule(ctx context.Context) {
	slots := make(chan struct{}, w.cfg.Concurrency)
	var scanned time.Time
	for {
		err := w.retireShared(ctx)
		if err == nil {
			err = w.loadRetired(ctx)
		}
		if err == nil {
			break
		}
		w.log.Warn("queue: no job taken until the consumer of older workers is retired", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(retireAgain):
		}
	}
	sub, every := w.listen()
	if sub != nil {
		defer func() { _ = sub.Unsubscribe() }()
	}
	for {
		select {
		case slots <- struct{}{}:
		case t := <-w.notices:
			w.notice(t)
			continue
		case <-ctx.Done():
			return
		}
		for {
			if time.Since(scanned) >= every || w.missed.Load() && time.Since(scanned) >= noticeRetry {
				w.missed.Store(false)
				w.scan(ctx)
				if w.shared {
					w.shared = false
					err := w.retireShared(ctx)
					if err == nil {
						err = w.loadRetired(ctx)
					}
					if err != nil {
						w.log.Warn("queue: the consumer of older workers is back: the tenants' consumers wait", "err", err)
					} else {
						w.scan(ctx)
					}
				}
				scanned = time.Now()
			}
			msg, adm, wake := w.take(ctx)
			if msg != nil {
				w.pulling.Add(1)
				go func() {
					defer func() {
						<-slots
						select {
						case w.ended <- struct{}{}:
						default:
						}
						w.pulling.Done()
					}()
					w.handle(msg, adm)
				}()
				break
			}
			wake = min(wake, time.Until(scanned.Add(every)))
			if w.missed.Load() {
				wake = min(wake, time.Until(scanned.Add(noticeRetry)))
			}
			select {
			case <-ctx.Done():
				return
			case <-w.ended:
			case <-w.exec.Freed():
				w.slotFreed()
			case t := <-w.notices:
				w.notice(t)
			case <-time.After(max(wake, time.Millisecond)):
			}
		}
	}
}

// take pulls the job of the next tenant round the lanes that has jobs
// and is admitted; none, it returns how long until one may be.
func (w *Worker) take(ctx context.Context) (jetstream.Msg, Admission, time.Duration) {
	now := time.Now()
	wake := rescanEvery
	n := len(w.order)
	for i := range n {
		l := w.lanes[w.order[(w.next+i)%n]]
		if !l.jobs || l.cons == nil {
			continue
		}
		if d := l.after.Sub(now); d > 0 {
			wake = min(wake, d)
			continue
		}
		// A subject of no tenant has its jobs terminated: nothing runs.
		var adm Admission
		if CheckTenant(l.tenant) == nil {
			var wait time.Duration
			if adm, wait = w.exec.Admit(l.tenant); adm == nil {
				l.forSlot = wait <= 0
				if l.forSlot {
					wait = retryEvery
				}
				l.after = now.Add(wait)
				wake = min(wake, wait)
				continue
			}
		}
		if l.stranger && w.takenOver(ctx, l) {
			// Its jobs are left to the workers that have the tenant.
			if adm != nil {
				adm.Release()
			}
			continue
		}
		msg, err := w.fetch(ctx, l)
		if msg == nil {
			if adm != nil {
				adm.Release()
			}
			switch {
			case err != nil:
				// Made again by the next look at the stream: an operator
				// (or another worker, of a stranger's drained subject) may
				// have deleted it.
				w.log.Debug("queue: pull", "tenant", l.tenant, "err", err)
				l.cons, l.jobs = nil, false
				w.missed.Store(true)
			case !l.retried && now.Sub(l.noticed) < 10*noticeRetry:
				// Noticed, and not there yet: the consumer's replica may
				// be a moment behind the stream's leader.
				l.retried, l.after = true, now.Add(noticeRetry)
				wake = min(wake, noticeRetry)
			default:
				l.jobs = false
				l.drained = l.stranger
			}
			continue
		}
		w.next = (w.next + i + 1) % n
		return msg, adm, 0
	}
	w.dropDrained(ctx)
	return nil, nil, wake
}

// slotFreed has the tenants refused for want of a slot tried again at
// once: a slot may be free.
func (w *Worker) slotFreed() {
	for _, l := range w.lanes {
		if l.forSlot {
			l.after, l.forSlot = time.Time{}, false
		}
	}
}

// dropDrained deletes the consumers of strangers whose jobs are all
// handed out and settled, and forgets their lanes: they are made again
// if jobs come on their subjects.
func (w *Worker) dropDrained(ctx context.Context) {
	keep := w.order[:0]
	for _, t := range w.order {
		l := w.lanes[t]
		if l.drained && time.Now().After(l.dropAt) {
			if w.dropStranger(ctx, l) {
				delete(w.lanes, t)
				w.strangers--
				// A stranger passed over for want of a place may have one.
				w.missed.Store(w.missed.Load() || w.crowded)
				continue
			}
			// A job of it is still held: tried again in a while.
			l.dropAt = time.Now().Add(10 * noticeRetry)
		}
		keep = append(keep, t)
	}
	clear(w.order[len(keep):])
	w.order = keep
	if len(w.order) > 0 {
		w.next %= len(w.order)
	} else {
		w.next = 0
	}
}

// takenOver reports whether a worker that has the stranger's tenant took
// its consumer over since this one made it: the lane is then foreign,
// and drained (forgotten, its consumer kept).
func (w *Worker) takenOver(ctx context.Context, l *lane) bool {
	ictx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := l.cons.Info(ictx)
	if err != nil || marked(info.Config) {
		return false // a pull that fails has the lane made again
	}
	l.foreign, l.jobs, l.drained = true, false, true
	return true
}

// dropStranger deletes a stranger's consumer if no job of it is pending
// or held and no worker that has its tenant took it over, and reports
// whether it did (or there was none, or it is another's).
func (w *Worker) dropStranger(ctx context.Context, l *lane) bool {
	if l.cons == nil || l.foreign {
		return true
	}
	dctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := l.cons.Info(dctx)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return true
	case err != nil || info.NumPending > 0 || info.NumAckPending > 0:
		return false
	case !marked(info.Config):
		return true // a worker that has the tenant uses it
	}
	err = w.js.DeleteConsumer(dctx, w.cfg.Stream, info.Name)
	return err == nil || errors.Is(err, jetstream.ErrConsumerNotFound)
}

// fetch pulls one job of the lane's consumer, if it has one to hand out
// now.
func (w *Worker) fetch(ctx context.Context, l *lane) (jetstream.Msg, error) {
	batch, err := l.cons.FetchNoWait(1)
	if err != nil {
		return nil, err
	}
	var msg jetstream.Msg
	for m := range batch.Messages() {
		msg = m
	}
	if msg != nil {
		return msg, nil
	}
	if err := batch.Error(); err != nil && ctx.Err() == nil {
		return nil, err
	}
	return nil, nil
}

// scan finds the tenants whose subjects hold jobs, and makes the
// consumer of a tenant new to this worker (or updates it to this
// config's ack wait, max ack pending and max deliver). A subject whose
// last token is a wildcard ('*', '>': a publisher may send on it as a
// literal) gets none: its filter would take every tenant's jobs.
func (w *Worker) scan(ctx context.Context) {
	sctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	info, err := w.stream.Info(sctx, jetstream.WithSubjectFilter(w.cfg.Subject+".*"))
	if err != nil {
		w.log.Debug("queue: stream info", "err", err)
		return
	}
	w.crowded = false
	// A stranger whose subject is empty now is drained.
	for _, l := range w.lanes {
		if l.stranger && info.State.Subjects[w.cfg.Subject+"."+l.tenant] == 0 {
			l.drained = true
		}
	}
	for subject, n := range info.State.Subjects {
		tenant, ok := strings.CutPrefix(subject, w.cfg.Subject+".")
		if n == 0 || !ok {
			continue
		}
		l := w.lanes[tenant]
		if l == nil {
			if tenant == "*" || tenant == ">" {
				if !w.wildWarned {
					w.wildWarned = true
					w.log.Warn("queue: jobs on a subject of a wildcard token left in the stream (until its max_age): "+
						"a consumer of it would take every tenant's jobs; a publisher may send on its tenant's subject alone",
						"subject", subject, "jobs", n)
				}
				continue
			}
			stranger := CheckTenant(tenant) != nil || !w.exec.Has(tenant)
			if stranger && w.strangers >= maxStrangers {
				// Taken once the strangers' consumers now drain.
				w.crowded = true
				continue
			}
			l = &lane{tenant: tenant, stranger: stranger}
			if stranger {
				w.strangers++
			}
			w.lanes[tenant] = l
			w.order = append(w.order, tenant)
		}
		if l.cons == nil {
			cc := jetstream.ConsumerConfig{
				Durable:       ConsumerName(w.cfg.Consumer, tenant),
				AckPolicy:     jetstream.AckExplicitPolicy,
				AckWait:       time.Duration(w.cfg.AckWait),
				MaxAckPending: w.cfg.MaxAckPending,
				MaxDeliver:    w.cfg.MaxDeliver,
				FilterSubject: subject,
			}
			if l.stranger {
				// Made, or taken as it is; never updated: a worker that
				// has the tenant may have made it, its own.
				cc.InactiveThreshold = max(strangerIdle, 2*time.Duration(w.cfg.AckWait))
				cc.Metadata = map[string]string{strangerMark: "1"}
				l.cons, err = w.js.CreateConsumer(sctx, w.cfg.Stream, cc)
				if errors.Is(err, jetstream.ErrConsumerExists) {
					if l.cons, err = w.js.Consumer(sctx, w.cfg.Stream, cc.Durable); err == nil && !marked(l.cons.CachedInfo().Config) {
						// Left to the workers that have the tenant.
						l.cons, l.foreign, l.drained = nil, true, true
						continue
					}
				}
			} else {
				l.cons, err = w.js.CreateOrUpdateConsumer(sctx, w.cfg.Stream, cc)
			}
			if err != nil {
				level := slog.LevelDebug
				if !l.warned {
					level, l.warned = slog.LevelWarn, true
				}
				w.log.Log(ctx, level, "queue: consumer of a tenant not made: its jobs wait", "tenant", tenant, "consumer", cc.Durable, "err", err)
				// An older worker started since this one retired their
				// consumer may have made it again, which a work-queue
				// stream lets no tenant's consumer overlap.
				if _, cerr := w.js.Consumer(sctx, w.cfg.Stream, w.cfg.Consumer); cerr == nil {
					w.shared = true
				}
				if l.stranger {
					// Its place goes to the next stranger; it is tried again.
					l.drained = true
				}
				continue
			}
			l.warned = false
		}
		l.jobs = true
	}
}
