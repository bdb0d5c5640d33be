package jail

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/cleanup"
	"github.com/pmjail/pmjail/jail/initstage"
)

// Warm keeps runtimes started ahead of their runs, for a daemon: each is a
// whole jail, set up to the last layer (namespaces, root, cgroup without
// limits, Landlock, privileges dropped, seccomp), whose runtime has started
// and waits on the guest channel for its start frame. Nothing in one
// depends on any job: it was built from a template (WarmJob) that holds no
// source, no input, no capabilities and no limits. The run that takes one
// gives its cgroup the job's limits, then sends the start frame, which
// carries the job's program (see Job.WarmChannel). Each serves one run and
// is torn down with it, as a run's own jail is.
type Warm struct {
	opt WarmOptions
	mu  sync.Mutex
	// sizes are how many runtimes to keep per template, by class (the
	// runtime's name).
	sizes   map[string]int
	tmpls   map[string]*warmTemplate
	idle    map[string][]*warmRuntime
	filling map[string]bool
	closed  bool
	fills   sync.WaitGroup
	done    chan struct{}
	// ctx ends with Close: a runtime still starting stops waiting for
	// its ready word.
	ctx     context.Context
	stop    context.CancelFunc
	janitor sync.WaitGroup
	// watchers are the goroutines that reap a runtime dying while it
	// waits (watch): Close waits for them.
	watchers sync.WaitGroup
	// unready counts the runtimes discarded for not saying they were
	// ready; failed the starts that failed, those included.
	unready, failed uint64
}

// WarmOptions tune a Warm pool.
type WarmOptions struct {
	// Spare reports whether a core is free for a refill (nil: always), as
	// for PoolOptions.Spare.
	Spare func() bool
	// OnError hears why a refill failed (nil: nobody).
	OnError func(error)
	// MaxAge is how long a runtime may wait before it is recycled (0:
	// forever).
	MaxAge time.Duration
	// MaxTemplates bounds how many templates (runtime, profile and
	// options) the pool keeps runtimes for (0: DefaultWarmTemplates).
	MaxTemplates int
	// MaxTemplatesPerOwner bounds how many of them the runs of one owner
	// (WarmJob.Owner, a tenant) may have brought in (0: a quarter of
	// MaxTemplates, at least one): one tenant cycling through option sets
	// would otherwise take every free template, leave other tenants' runs
	// cold, and keep runtimes idle for each. Templates learnt without an
	// owner (a daemon's prewarmed defaults) count for none.
	MaxTemplatesPerOwner int
	// Retry is how long a refill waits after a start failed before it
	// tries again (0: warmRetry), doubled with each failure in a row up
	// to warmRetryMax: a start that failed once (a runtime's files being
	// replaced, a host briefly short of memory) does not leave the pool
	// empty until a run asks, and one that always fails costs little.
	Retry time.Duration
}

// DefaultWarmTemplates is WarmOptions.MaxTemplates's default. Each
// template keeps its class's size of runtimes, each holding a job id
// slot (MaxJobs) while it waits: a daemon's config counts them.
const DefaultWarmTemplates = 8

// The first wait after a failed start, and the longest.
const (
	warmRetry    = 250 * time.Millisecond
	warmRetryMax = 30 * time.Second
)

// WarmJob is what a run offers the Warm pool: the key of its jail with
// everything of the job's taken out, that jail itself as the template the
// pool starts runtimes from, and the class (runtime) whose size applies.
// Template may be nil when the pool knew the key (Knows): a run of a key
// the pool forgot meanwhile then goes cold, and the next teaches it.
type WarmJob struct {
	Key      string
	Class    string
	Template *Job
	// Owner is whose run offers it (a tenant), empty for none: a template
	// a run brings in counts against its owner's MaxTemplatesPerOwner.
	Owner string
}

// Knows reports whether the pool keeps runtimes for the template of key.
func (w *Warm) Knows(key string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.tmpls[key] != nil
}

type warmTemplate struct {
	class string
	job   *Job
	// sources are the host files its jail binds or copies, as they were
	// when it was learnt (see stale).
	sources []source
	// owner is whose run brought it in (WarmJob.Owner).
	owner string
	// used is when a run last asked for it: one no run asked for in
	// MaxAge is forgotten with its runtimes (recycle).
	used time.Time
	// failures counts its starts that failed in a row, and failure is
	// why the last one did (nil once one started).
	failures int
	failure  error
}

// warmRuntime is one runtime waiting for its job, and what the supervisor
// holds of it.
type warmRuntime struct {
	child *child
	cg    Cgroup
	conn  net.Conn
	// observed is the runtime's state, read back once it was ready.
	observed *Observed
	// pidfd of the runtime; listener the seccomp notification fd (-1:
	// none).
	pidfd, listener int
	landlock        int
	landlockReason  string
	started         time.Time
	// unwatch ends the pool's watch for its death while it waits
	// (Warm.watch); nil when none watches.
	unwatch func()
}

// stopWatch ends the pool's watch for r's death, if one watches: r
// leaves the idle runtimes, for a run or to be discarded.
func (r *warmRuntime) stopWatch() {
	if r.unwatch != nil {
		r.unwatch()
		r.unwatch = nil
	}
}

// watch reaps r, about to wait among key's idle runtimes (w.mu held), as
// soon as its jail dies there (watchExit: its init stage exits with its
// runtime), rather than at recycle's next round: a run that takes r
// ends the watch first (stopWatch), putBack starts another.
func (w *Warm) watch(key string, r *warmRuntime) {
	r.unwatch = watchExit(r.child.proc.Pid, &w.watchers, func() {
		if dropIdle(&w.mu, &w.idle, key, r) { // else taken, or ended by Resize, recycle or Close
			w.discardAll([]*warmRuntime{r})
			w.replenish(key)
		}
	})
}

// NewWarm returns a pool that keeps, per template, sizes[class] runtimes.
func NewWarm(sizes map[string]int, opt WarmOptions) *Warm {
	if opt.MaxTemplates <= 0 {
		opt.MaxTemplates = DefaultWarmTemplates
	}
	if opt.MaxTemplatesPerOwner <= 0 {
		opt.MaxTemplatesPerOwner = max(1, opt.MaxTemplates/4)
	}
	if opt.Retry <= 0 {
		opt.Retry = warmRetry
	}
	w := &Warm{opt: opt, sizes: map[string]int{}, tmpls: map[string]*warmTemplate{}, idle: map[string][]*warmRuntime{}, filling: map[string]bool{}, done: make(chan struct{})}
	w.ctx, w.stop = context.WithCancel(context.Background())
	w.Resize(sizes)
	if opt.MaxAge > 0 {
		w.janitor.Add(1)
		go w.recycle()
	}
	return w
}

// Size is how many runtimes the pool keeps per template of class.
func (w *Warm) Size(class string) int {
	if w == nil {
		return 0
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.sizes[class]
}

// Resize sets the sizes by class, ending the runtimes over them.
func (w *Warm) Resize(sizes map[string]int) {
	var extra []*warmRuntime
	w.mu.Lock()
	w.sizes = map[string]int{}
	for k, v := range sizes {
		w.sizes[k] = max(v, 0)
	}
	for key, q := range w.idle {
		n := w.sizes[w.tmpls[key].class]
		if len(q) > n {
			extra = append(extra, q[n:]...)
			w.idle[key] = q[:n]
		}
	}
	w.mu.Unlock()
	w.discardAll(extra)
}

// take returns an idle runtime started from wj's template, or nil and why
// there is none. A template it has not seen is learnt, and filled after
// the run (replenish).
func (w *Warm) take(wj *WarmJob) (*warmRuntime, string) {
	var got *warmRuntime
	var dead []*warmRuntime
	reason := ""
	var sources []source
	if w.learns(wj) {
		// A template the pool does not know: a new profile or option
		// set, or the runtime's files rebuilt (`pmjail prepare`), which
		// leaves the templates of the old ones nobody can take. Those
		// go first, so that they neither wait for MaxAge nor hold the
		// places (MaxTemplates) the new one needs.
		w.dropStale()
		sources = sourcesOf(wj.Template)
	}
	w.mu.Lock()
	switch {
	case w.closed:
		reason = "the daemon is shutting down"
	case w.sizes[wj.Class] == 0:
		reason = fmt.Sprintf("no warm runtimes are kept for %s", wj.Class)
	case w.tmpls[wj.Key] == nil && len(w.tmpls) >= w.opt.MaxTemplates:
		reason = fmt.Sprintf("warm runtimes are kept for %d profiles and option sets, and this run's is none of them", w.opt.MaxTemplates)
	case w.tmpls[wj.Key] == nil && wj.Owner != "" && w.ownedBy(wj.Owner) >= w.opt.MaxTemplatesPerOwner:
		reason = fmt.Sprintf("warm runtimes are kept for %d option sets of %s's runs already, the most one tenant's may bring in", w.opt.MaxTemplatesPerOwner, wj.Owner)
	case w.tmpls[wj.Key] == nil && wj.Template == nil:
		reason = "warm runtimes for its profile and options were recycled as it came: they start with the next run"
	case w.tmpls[wj.Key] == nil:
		w.tmpls[wj.Key] = &warmTemplate{class: wj.Class, job: wj.Template, sources: sources, owner: wj.Owner, used: time.Now()}
		reason = "the first run of its profile and options: warm runtimes for it start now"
	default:
		w.tmpls[wj.Key].used = time.Now()
		q := w.idle[wj.Key]
		for got == nil && len(q) > 0 {
			r := q[0]
			q = q[1:]
			if r.child.waiting() && !w.old(r) {
				got = r
			} else {
				dead = append(dead, r)
			}
		}
		w.idle[wj.Key] = q
		if got == nil {
			reason = "no warm runtime was idle"
			if t := w.tmpls[wj.Key]; t.failure != nil {
				reason += fmt.Sprintf(" (%d starts failed in a row, the last: %v)", t.failures, t.failure)
			}
		}
	}
	w.mu.Unlock()
	w.discardAll(dead)
	if got != nil {
		got.stopWatch()
	}
	return got, reason
}

// learns reports whether take would learn wj's template, but for the
// places (MaxTemplates, MaxTemplatesPerOwner) that stale templates may
// hold: a class the pool keeps, and a key it does not know.
func (w *Warm) learns(wj *WarmJob) bool {
	if wj.Template == nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.closed && w.sizes[wj.Class] > 0 && w.tmpls[wj.Key] == nil
}

// ownedBy counts the templates owner's runs brought in (w.mu held).
func (w *Warm) ownedBy(owner string) int {
	n := 0
	for _, t := range w.tmpls {
		if t.owner == owner {
			n++
		}
	}
	return n
}

// putBack returns r, taken for a job it could not serve and untouched,
// to the front of key's idle runtimes (it is the oldest), or ends it when
// the pool no longer wants it.
func (w *Warm) putBack(key string, r *warmRuntime) {
	w.mu.Lock()
	t := w.tmpls[key]
	keep := !w.closed && t != nil && len(w.idle[key]) < w.sizes[t.class]
	if keep {
		w.watch(key, r)
		w.idle[key] = append([]*warmRuntime{r}, w.idle[key]...)
	}
	w.mu.Unlock()
	if !keep {
		w.discardAll([]*warmRuntime{r})
	}
}

// Learn makes wj's template one the pool keeps runtimes for, before any
// run asked for it (a daemon's start), and starts filling it.
func (w *Warm) Learn(wj *WarmJob) {
	if wj.Template == nil {
		return
	}
	w.dropStale()
	sources := sourcesOf(wj.Template)
	w.mu.Lock()
	if w.closed || w.sizes[wj.Class] == 0 || w.tmpls[wj.Key] != nil || len(w.tmpls) >= w.opt.MaxTemplates {
		w.mu.Unlock()
		return
	}
	w.tmpls[wj.Key] = &warmTemplate{class: wj.Class, job: wj.Template, sources: sources, used: time.Now()}
	w.mu.Unlock()
	w.replenish(wj.Key)
}

// Refill tops up every template's runtimes, as a run's end does, for a
// caller whose runs end after their answer (Job.Answer): the run's own
// refill may have found no core spare while its slot was still counted.
func (w *Warm) Refill() {
	if w == nil {
		return
	}
	w.mu.Lock()
	keys := make([]string, 0, len(w.tmpls))
	for key := range w.tmpls {
		keys = append(keys, key)
	}
	w.mu.Unlock()
	for _, key := range keys {
		w.replenish(key)
	}
}

// old reports whether r has waited longer than MaxAge.
func (w *Warm) old(r *warmRuntime) bool {
	return w.opt.MaxAge > 0 && time.Since(r.started) > w.opt.MaxAge
}

// replenish starts runtimes for key in the background, one at a time,
// while a core is spare, until the pool holds its size of them.
func (w *Warm) replenish(key string) {
	if w == nil {
		return
	}
	if w.opt.Spare != nil && !w.opt.Spare() {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	t := w.tmpls[key]
	if w.closed || t == nil || w.filling[key] || len(w.idle[key]) >= w.sizes[t.class] {
		return
	}
	w.filling[key] = true
	w.fills.Add(1)
	go w.fill(key, t)
}

// fill starts runtimes for key until the pool holds its size of them; a
// start that failed is tried again after a wait (retryAfter), so that the
// pool does not stay empty until a run asks for it.
func (w *Warm) fill(key string, t *warmTemplate) {
	defer w.fills.Done()
	for {
		w.mu.Lock()
		// A template that keeps failing and no run asked for in MaxAge is
		// left to recycle, which forgets it: its retries would go on for
		// as long as the daemon.
		forgotten := t.failures > 0 && w.opt.MaxAge > 0 && time.Since(t.used) > w.opt.MaxAge
		replaced := w.tmpls[key] != t // forgotten meanwhile (dropStale)
		if w.closed || forgotten || replaced || len(w.idle[key]) >= w.sizes[t.class] || (w.opt.Spare != nil && !w.opt.Spare()) {
			w.filling[key] = false
			w.mu.Unlock()
			if replaced {
				w.replenish(key) // a template of the same key learnt since
			}
			return
		}
		w.mu.Unlock()
		// A template whose runtime's files were replaced (an upgrade
		// that kept their paths, so its key) starts no more runtimes of
		// the old ones: it is forgotten with those waiting, and the next
		// run teaches the pool the files as they are.
		if t.stale() {
			w.forget(map[string]*warmTemplate{key: t})
			continue
		}
		r, err := startWarm(w.ctx, t.job)
		w.mu.Lock()
		if w.closed || w.tmpls[key] != t {
			w.mu.Unlock()
			if r != nil {
				w.discardAll([]*warmRuntime{r})
			}
			continue // the loop's top ends the fill
		}
		if err != nil {
			w.failed++
			if errors.Is(err, errUnready) {
				w.unready++
			}
			t.failures++
			t.failure = err
			wait := w.retryAfter(t.failures)
			w.mu.Unlock()
			if w.opt.OnError != nil {
				w.opt.OnError(fmt.Errorf("start a warm runtime (again in %s): %w", wait, err))
			}
			timer := time.NewTimer(wait)
			select {
			case <-w.done:
				timer.Stop()
			case <-timer.C:
			}
			continue
		}
		t.failures, t.failure = 0, nil
		w.watch(key, r)
		w.idle[key] = append(w.idle[key], r)
		w.mu.Unlock()
	}
}

// retryAfter is how long a refill waits after the nth failed start in a
// row: Retry, doubled with each one after, up to warmRetryMax.
func (w *Warm) retryAfter(n int) time.Duration {
	d := w.opt.Retry
	for i := 1; i < n && d < warmRetryMax; i++ {
		d *= 2
	}
	return min(d, max(warmRetryMax, w.opt.Retry))
}

// source is a host file a template's jail binds or copies, as it was.
type source struct {
	path string
	st   os.FileInfo // nil: it was missing already
}

// sourcesOf are the host files job's jail binds or copies (the runtime,
// its libraries or their tree of links, its caches and snapshot), as
// they are now.
func sourcesOf(job *Job) []source {
	if job.Spec == nil {
		return nil
	}
	var out []source
	for _, m := range job.Spec.Mounts {
		if (m.Type == "bind" || m.Type == "copy") && filepath.IsAbs(m.Source) {
			st, _ := os.Stat(m.Source)
			out = append(out, source{m.Source, st})
		}
	}
	return out
}

// stale reports whether a file t's jail binds or copies is gone or
// replaced since t was learnt: `pmjail prepare` after an upgrade builds
// new caches and a new snapshot (new paths, so new runs' templates have
// new keys) and removes the old, or replaces a runtime at its path. The
// runtimes waiting with the old files serve no run, and a start would
// fail or start the new files under the old key. A file is compared by
// its identity (device and inode) alone: a bind shows what is written
// into the same file, so only another file at the path (an upgrade
// renames the new one into place) leaves a waiting runtime behind, and a
// file written often (an operator's bind) does not empty the pool.
func (t *warmTemplate) stale() bool {
	for _, s := range t.sources {
		now, err := os.Stat(s.path)
		switch {
		case s.st == nil || err != nil:
			if (s.st == nil) != (err != nil) {
				return true // gone, or there now
			}
		case !os.SameFile(s.st, now):
			return true
		}
	}
	return false
}

// dropStale forgets the templates whose files are gone or replaced
// (stale), with their idle runtimes. The files are read without w.mu.
func (w *Warm) dropStale() {
	w.mu.Lock()
	all := maps.Clone(w.tmpls)
	w.mu.Unlock()
	maps.DeleteFunc(all, func(_ string, t *warmTemplate) bool { return !t.stale() })
	w.forget(all)
}

// forget drops the templates of tmpls (key -> template, each dropped only
// if it is still the pool's for its key) and ends their idle runtimes.
// A fill under way for one ends at its next round.
func (w *Warm) forget(tmpls map[string]*warmTemplate) {
	if len(tmpls) == 0 {
		return
	}
	var dead []*warmRuntime
	w.mu.Lock()
	for key, t := range tmpls {
		if w.tmpls[key] == t {
			dead = append(dead, w.idle[key]...)
			delete(w.idle, key)
			delete(w.tmpls, key)
		}
	}
	w.mu.Unlock()
	w.discardAll(dead)
}

// recycle ends, every quarter of MaxAge, the runtimes older than it, and
// starts their replacements.
func (w *Warm) recycle() {
	defer w.janitor.Done()
	t := time.NewTicker(w.opt.MaxAge / 4)
	defer t.Stop()
	for {
		select {
		case <-w.done:
			return
		case <-t.C:
		}
		w.dropStale()
		var dead []*warmRuntime
		var keys []string
		w.mu.Lock()
		for key, t := range w.tmpls {
			// A template no run asked for in MaxAge (a profile gone
			// out of use) keeps nothing.
			if time.Since(t.used) > w.opt.MaxAge && !w.filling[key] {
				dead = append(dead, w.idle[key]...)
				delete(w.idle, key)
				delete(w.tmpls, key)
			}
		}
		for key, q := range w.idle {
			kept := q[:0]
			for _, r := range q {
				if w.old(r) || !r.child.waiting() {
					dead = append(dead, r)
				} else {
					kept = append(kept, r)
				}
			}
			w.idle[key] = kept
			keys = append(keys, key)
		}
		w.mu.Unlock()
		w.discardAll(dead)
		for _, key := range keys {
			w.replenish(key)
		}
	}
}

// Close ends every idle runtime, waiting for fills under way; later takes
// find none.
func (w *Warm) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	close(w.done)
	w.stop()
	w.mu.Unlock()
	w.janitor.Wait()
	w.fills.Wait()
	w.mu.Lock()
	idle := w.idle
	w.idle = map[string][]*warmRuntime{}
	w.mu.Unlock()
	for _, q := range idle {
		w.discardAll(q)
	}
	w.watchers.Wait()
}

// WarmStats is what the idle runtimes hold.
type WarmStats struct {
	// Idle counts them by class.
	Idle map[string]int
	// MemoryBytes is the memory their cgroups hold, Memory the same by
	// class.
	MemoryBytes uint64
	Memory      map[string]uint64
	// Unready counts the runtimes discarded, since the pool began, for
	// not saying they were ready (Job.Ready).
	Unready uint64
	// Failed counts the starts that failed since the pool began, the
	// unready ones included: each is tried again (WarmOptions.Retry).
	Failed uint64
}

// Stats counts the idle runtimes and the memory they hold.
func (w *Warm) Stats() WarmStats {
	st := WarmStats{Idle: map[string]int{}, Memory: map[string]uint64{}}
	if w == nil {
		return st
	}
	type held struct {
		class string
		cg    Cgroup
	}
	var cgs []held
	w.mu.Lock()
	st.Unready, st.Failed = w.unready, w.failed
	for key, q := range w.idle {
		class := w.tmpls[key].class
		st.Idle[class] += len(q)
		for _, r := range q {
			cgs = append(cgs, held{class, r.cg})
		}
	}
	w.mu.Unlock()
	for _, h := range cgs {
		if m, ok := h.cg.(interface{ MemoryNow() (uint64, error) }); ok {
			if n, err := m.MemoryNow(); err == nil {
				st.MemoryBytes += n
				st.Memory[h.class] += n
			}
		}
	}
	return st
}

func (w *Warm) discardAll(rs []*warmRuntime) {
	for _, r := range rs {
		if err := r.discard(); err != nil && w.opt.OnError != nil {
			w.opt.OnError(fmt.Errorf("discard a warm runtime: %w", err))
		}
	}
}

// errUnready: a runtime started but did not say it was ready.
var errUnready = errors.New("not ready")

// startWarm builds tmpl's jail and starts its runtime, and returns once
// the runtime said it waits for its start frame (Job.Ready). tmpl has a
// cgroup (Cgroups) without limits and a channel.
func startWarm(ctx context.Context, tmpl *Job) (*warmRuntime, error) {
	if tmpl.Cgroups == nil || tmpl.Channel == nil || tmpl.Ready == nil {
		return nil, errors.New("a warm runtime needs a cgroup, a channel and a ready check")
	}
	s := &supervision{job: tmpl, out: &Outcome{}, runtime: -1, listener: -1, keepListener: true}
	// The cgroup has every controller and no limits: the run that takes
	// the runtime gives it the job's (fit).
	cg, err := tmpl.Cgroups.Reserve(reserveID())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", initstage.StageCgroup, err)
	}
	c, stage, err := startChild(cloneFlags(tmpl.Spec), cg)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("%s: %w", stage, err), cg.Delete())
	}
	s.ownCgroup(madeCgroup{cg: cg})
	s.child = c
	conn, err := s.handOver(context.Background())
	s.awaitCgroup()
	if err == nil && conn == nil {
		err = errors.New("the runtime has no channel")
	}
	r := &warmRuntime{child: c, cg: s.out.Cgroup, conn: conn, pidfd: -1, listener: s.listener,
		landlock: s.out.Landlock, landlockReason: s.out.LandlockReason, started: time.Now()}
	s.out.Cgroup = nil
	if err != nil {
		s.closeRuntime()
		return nil, errors.Join(fmt.Errorf("%s: %w", s.out.InitStage, err), r.discard())
	}
	// Idle only once the runtime is: a run's task check (fit) then sees
	// all its threads, and its CPU baseline holds its whole start.
	if err := tmpl.Ready(ctx, conn); err != nil {
		s.closeRuntime()
		return nil, errors.Join(fmt.Errorf("%w: %w", errUnready, err), r.discard())
	}
	// Its state is read back now, off any run's path: what its job's
	// result reports is this process's, which no job has touched yet and
	// which can only tighten (filters, capabilities, no_new_privs and
	// Landlock stay; the seccomp filter refuses setns and mount). Its
	// pidfd stays: the run's answer kills the runtime through it.
	r.observed = s.readRuntime()
	r.pidfd, s.runtime = s.runtime, -1
	if r.observed.Error != "" {
		return nil, errors.Join(fmt.Errorf("%w: read back: %s", errUnready, r.observed.Error), r.discard())
	}
	return r, nil
}

// discard kills the runtime's jail, reaps it and frees what the supervisor
// holds of it, its cgroup included.
func (r *warmRuntime) discard() error {
	r.stopWatch()
	_ = r.child.proc.Signal(syscall.SIGKILL)
	if r.cg != nil {
		_ = r.cg.Kill()
	}
	_, _ = r.child.proc.Wait()
	if r.conn != nil {
		r.conn.Close()
	}
	for _, fd := range []int{r.pidfd, r.listener} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	r.child.ctl.Close()
	r.child.stdout.Close()
	r.child.stderr.Close()
	r.child.lease.release()
	if r.cg == nil {
		return nil
	}
	return r.cg.Delete()
}

// runWarm runs the job on a warm runtime if one serves it, and reports
// whether one did (the outcome is then the run's); otherwise the run goes
// on cold, and Outcome.WarmReason says why. cu takes what the run holds.
func (s *supervision) runWarm(ctx context.Context, cancel context.CancelFunc, cu *cleanup.Cleanup) bool {
	job := s.job
	r, reason := job.Warm.take(job.WarmJob)
	if r == nil {
		s.out.WarmReason = reason
		return false
	}
	base, reason, touched := r.fit(job.Spec.Linux.Resources)
	if reason != "" {
		if touched {
			job.Warm.discardAll([]*warmRuntime{r})
		} else {
			// Nothing of the job reached it: it waits for the next one,
			// so that a stream of jobs it cannot serve does not empty
			// the pool for everyone.
			job.Warm.putBack(job.WarmJob.Key, r)
		}
		s.out.WarmReason = reason
		return false
	}
	// The runtime's cgroup is the job's from here: the outcome owns it.
	s.ownCgroup(madeCgroup{cg: r.cg})
	s.cpuBase = base
	s.child, s.runtime = r.child, r.pidfd
	cu.Add(s.closeRuntime)
	s.out.Observed = r.observed
	s.out.Warm, s.out.InitTasks = true, r.child.initTasks
	s.out.Landlock, s.out.LandlockReason = r.landlock, r.landlockReason
	cu.Add(r.child.lease.release)
	cu.Add(func() { r.child.ctl.Close() })
	if r.listener >= 0 {
		if job.Denials != nil {
			go job.Denials(ctx, r.listener)
		} else {
			unix.Close(r.listener)
		}
	}
	// The wall clock counts from the delivery of the start frame, which
	// supervise sends at once.
	timer := time.AfterFunc(job.Timeout, func() {
		s.stop(killReason{status: StatusTimeout, limit: "wall", msg: fmt.Sprintf("wall-clock limit of %s exceeded", job.Timeout)})
	})
	cu.Add(func() { timer.Stop() })
	out := s.capture()
	end := s.supervise(ctx, cancel, r.conn, out, cu)
	if !s.answered {
		s.finish(end.state, end.err, out)
	}
	return true
}

// fit gives the runtime's cgroup the job's limits res, first of all, and
// returns the cgroup's CPU time then (the runtime's own start, which the
// job's CPU time leaves out); or why the job cannot run on it: the runtime
// already holds more memory or tasks than the job may, or the cgroup
// refused a limit. touched says whether it wrote to the cgroup: a runtime
// refused before that is as it was.
func (r *warmRuntime) fit(res *specs.LinuxResources) (base time.Duration, reason string, touched bool) {
	base, reason = r.check(res)
	if reason != "" {
		return 0, reason, false
	}
	// pid 1's share of the tasks, its thread on cgroup v1 or all the
	// init stage's on v2 (see openGate): the bound leaves it room, as a
	// cold run's does.
	if err := r.cg.SetLimits(withTasks(res, int64(r.child.initTasks))); err != nil {
		return 0, "the warm runtime's cgroup refused the job's limits: " + err.Error(), true
	}
	return base, "", true
}

// check is fit's reading part: the cgroup's CPU time, or why the job
// cannot run on the runtime.
func (r *warmRuntime) check(res *specs.LinuxResources) (time.Duration, string) {
	if res == nil {
		res = &specs.LinuxResources{}
	}
	if res.Memory != nil && res.Memory.Limit != nil && *res.Memory.Limit > 0 {
		m, ok := r.cg.(interface{ MemoryNow() (uint64, error) })
		if !ok {
			return 0, "the warm runtime's memory cannot be read"
		}
		now, err := m.MemoryNow()
		if err != nil {
			return 0, "the warm runtime's memory cannot be read: " + err.Error()
		}
		if now > uint64(*res.Memory.Limit) {
			return 0, fmt.Sprintf("the warm runtime holds %d bytes, above the job's memory limit of %d", now, *res.Memory.Limit)
		}
	}
	if limit := tasksLimit(res); limit > 0 {
		peak, err := tasksPeak(r.cg)
		if err != nil {
			return 0, "the warm runtime's tasks cannot be counted: " + err.Error()
		}
		if own := r.child.initTasks; peak > uint64(limit)+own {
			return 0, fmt.Sprintf("the warm runtime runs %d tasks, above the job's limit of %d", peak-own, limit)
		}
	}
	base, err := r.cg.CPUTime()
	if err != nil {
		return 0, "the warm runtime's CPU time cannot be read: " + err.Error()
	}
	return base, ""
}

// tasksPeak is cg's PidsPeak, read alone where cg can.
func tasksPeak(cg Cgroup) (uint64, error) {
	if t, ok := cg.(interface{ TasksPeak() (uint64, error) }); ok {
		return t.TasksPeak()
	}
	u, err := cg.Stats()
	return u.PidsPeak, err
}
