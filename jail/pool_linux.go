package jail

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"sync"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/cleanup"
	"github.com/pmjail/pmjail/jail/initstage"
)

// Pool keeps init stages started ahead of their runs, for a daemon. The
// clone into new namespaces, the exec of pmjail-init and its Go start-up
// are about half of a run's set-up (~3 of ~6 ms here); a pooled child has
// done them while the previous run was going, on a core that run left
// idle. A pooled child holds its namespaces, its lease of host ids, the
// init stage's own code and, with PoolOptions.Cgroups, a cgroup without
// limits; nothing of any job: what to build and run arrives with its
// configuration, the run that takes it gives the cgroup the job's limits,
// and it joins the job's cgroup before it writes anything of the job's.
// Each child serves one run.
type Pool struct {
	opt     PoolOptions
	mu      sync.Mutex
	size    int
	idle    map[uintptr][]*child
	filling map[uintptr]bool
	// plans are, per set of namespaces, the root the last run asked for
	// (an encoded initstage.Premount), which new children mount ahead.
	plans  map[uintptr][]byte
	closed bool
	fills  sync.WaitGroup
	// watchers are the goroutines that reap a child dying in the pool
	// (watch): Close waits for them.
	watchers sync.WaitGroup
	// changed tells takes that wait (PoolOptions.Await) that a fill
	// added a child or ended.
	changed *sync.Cond
}

// PoolOptions tune a Pool.
type PoolOptions struct {
	// Spare reports whether a core is free for a refill (nil: always). On a
	// host whose cores are all taken by runs, a refill only moves a run's
	// start-up onto the same saturated CPU, and measured a little slower
	// (2-4% fewer runs a second at concurrency 2 on two cores) than none.
	Spare func() bool
	// OnError hears why a refill failed (nil: nobody). Runs then start
	// their own init stages, and report their own failures.
	OnError func(error)
	// Cgroups, when set, reserves the cgroup each child waits with,
	// without limits (Cgroups.Reserve): on cgroup v2 the child is born in
	// it, on v1 it joins at hand-over as a run's own child does. Such a
	// child serves only runs with a cgroup (Job.Cgroups), which adopt its
	// cgroup: the cgroup's making is then off the run's path, and on v2 a
	// run can take a child at all, which must be born in its job's cgroup.
	// Without it, children serve the runs whose child need not be born in
	// a cgroup.
	Cgroups Cgroups
	// Await makes a take that finds no child wait for a fill under way
	// rather than return none: for a one-shot run (the CLI) that starts
	// its one child with Prestart while it builds its job, so that the
	// run takes that child instead of starting a second.
	Await bool
}

// NewPool returns a pool that keeps up to size children for each set of
// namespaces it has been asked for (it learns them from take).
func NewPool(size int, opt PoolOptions) *Pool {
	p := &Pool{opt: opt, size: max(size, 0), idle: map[uintptr][]*child{}, filling: map[uintptr]bool{}, plans: map[uintptr][]byte{}}
	p.changed = sync.NewCond(&p.mu)
	return p
}

// serves reports whether the pool's children can serve job's run (see
// PoolOptions.Cgroups); a nil pool serves none.
func (p *Pool) serves(job *Job) bool {
	switch {
	case p == nil:
		return false
	case p.opt.Cgroups != nil:
		return job.Cgroups != nil
	}
	// A child started outside any cgroup cannot serve a run whose child
	// must be born in its cgroup: moving one in from outside waits for an
	// RCU grace period (~8 ms).
	return job.Cgroups == nil || !job.Cgroups.AtBirth()
}

// plan is the premount of job's root for the pool's children (nil: no
// pool, or none can be made).
func (p *Pool) plan(job *Job) []byte {
	if p == nil {
		return nil
	}
	hostMountNS, err := ownMountNS()
	if err != nil {
		return nil
	}
	plan, err := (&initstage.Premount{Mounts: job.Spec.Mounts, HostMountNS: hostMountNS}).MarshalBinary()
	if err != nil {
		return nil
	}
	return plan
}

// take returns a live child started in the namespaces flags, or nil when
// there is none (or no pool): one whose root was premounted as plan (an
// encoded initstage.Premount of the run's mounts) if any, else another,
// whose init stage then builds the run's root itself. Children started
// from now on premount plan's root.
func (p *Pool) take(flags uintptr, plan []byte) *child {
	if p == nil {
		return nil
	}
	var got *child
	var dead []*child
	p.mu.Lock()
	if plan != nil {
		p.plans[flags] = plan
	}
	for p.opt.Await && len(p.idle[flags]) == 0 && p.filling[flags] {
		p.changed.Wait()
	}
	q := p.idle[flags]
	if plan != nil {
		// A child whose root is mounted for this plan goes first; the
		// others keep their order, oldest first.
		if i := slices.IndexFunc(q, func(c *child) bool { return bytes.Equal(c.plan, plan) }); i > 0 {
			c := q[i]
			copy(q[1:i+1], q[:i])
			q[0] = c
		}
	}
	for got == nil && len(q) > 0 {
		c := q[0]
		q = q[1:]
		if c.waiting() {
			got = c
		} else {
			dead = append(dead, c)
		}
	}
	p.idle[flags] = q
	p.mu.Unlock()
	for _, c := range dead {
		p.discard(c)
	}
	if got != nil {
		got.stopWatch()
	}
	return got
}

// replenish starts children in the background until the pool holds size
// of them for the namespaces flags. A run calls it once its own set-up is
// done: a refill that competed with that set-up for the CPU would slow the
// very run the pool is there to speed up.
func (p *Pool) replenish(flags uintptr) {
	if p == nil {
		return
	}
	if p.opt.Spare != nil && !p.opt.Spare() {
		return
	}
	p.startFill(flags)
}

// Prestart starts children in the background for the namespaces ns (as a
// spec lists them) until the pool holds size of them, whether or not a
// core is spare: a one-shot run's own child, started while the run builds
// its job (see PoolOptions.Await).
func (p *Pool) Prestart(ns []specs.LinuxNamespace) {
	if p == nil {
		return
	}
	p.startFill(cloneFlags(&specs.Spec{Linux: &specs.Linux{Namespaces: ns}}))
}

// startFill starts a fill for the namespaces flags unless one is under way
// or the pool is full.
func (p *Pool) startFill(flags uintptr) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || p.filling[flags] || len(p.idle[flags]) >= p.size {
		return
	}
	p.filling[flags] = true
	p.fills.Add(1)
	go p.fill(flags)
}

// fill starts children one at a time until the pool has size of them: one
// at a time, so that refilling never takes more than one core from runs.
// A child that fails to start ends the fill; runs start their own then,
// and report why.
func (p *Pool) fill(flags uintptr) {
	defer p.fills.Done()
	for {
		p.mu.Lock()
		if p.closed || len(p.idle[flags]) >= p.size {
			p.filling[flags] = false
			p.changed.Broadcast()
			p.mu.Unlock()
			return
		}
		plan := p.plans[flags]
		p.mu.Unlock()
		c, stage, err := p.start(flags, plan)
		p.mu.Lock()
		if err != nil || p.closed {
			p.filling[flags] = false
			p.changed.Broadcast()
			p.mu.Unlock()
			if c != nil {
				p.discard(c)
			}
			if err != nil && p.opt.OnError != nil {
				p.opt.OnError(fmt.Errorf("start an init stage ahead: %s: %w", stage, err))
			}
			return
		}
		p.watch(flags, c)
		p.idle[flags] = append(p.idle[flags], c)
		p.changed.Broadcast()
		p.mu.Unlock()
	}
}

// watch reaps c, about to wait in the pool for the namespaces flags, as
// soon as it dies there (watchExit); whatever takes c out of the pool (a
// take, Resize, Close) ends that watch first (child.stopWatch). Without
// pidfds a take still passes over a dead child.
func (p *Pool) watch(flags uintptr, c *child) {
	c.unwatch = watchExit(c.proc.Pid, &p.watchers, func() {
		if dropIdle(&p.mu, &p.idle, flags, c) { // else a take or Close has it
			p.discard(c)
			p.replenish(flags)
		}
	})
}

// start starts one child for the pool, with its cgroup if the pool holds
// them, and has it mount plan's root while it waits (nil: none).
func (p *Pool) start(flags uintptr, plan []byte) (c *child, stage initstage.Stage, err error) {
	var cu cleanup.Cleanup
	defer cu.Clean()
	var cg Cgroup
	var reserving chan madeCgroup
	switch {
	case p.opt.Cgroups == nil:
	case p.opt.Cgroups.AtBirth():
		if cg, err = p.opt.Cgroups.Reserve(reserveID()); err != nil {
			return nil, initstage.StageCgroup, err
		}
	default:
		// The child joins its cgroup at hand-over (v1): the cgroup is made
		// while the child starts, as a run's own is.
		reserving = make(chan madeCgroup, 1)
		go func() {
			cg, err := p.opt.Cgroups.Reserve(reserveID())
			reserving <- madeCgroup{cg, err}
		}()
	}
	cu.Add(func() {
		if reserving != nil {
			made := <-reserving
			cg, err = made.cg, errors.Join(err, made.err)
		}
		if cg == nil {
			return
		}
		if derr := cg.Delete(); derr != nil {
			err = errors.Join(err, derr)
		}
	})
	if c, stage, err = startChild(flags, cg); err != nil {
		return nil, stage, err
	}
	if reserving != nil {
		made := <-reserving
		reserving = nil
		if made.err != nil {
			err = made.err
			p.discard(c)
			return nil, initstage.StageCgroup, err
		}
		cg = made.cg
	}
	cu.Release()
	c.cgroup = cg
	if plan != nil {
		if err := initstage.SendMessage(int(c.ctl.Fd()), plan, nil); err != nil {
			return c, initstage.StagePremount, err
		}
		c.plan = plan
	}
	return c, initstage.StageNone, nil
}

// discard ends a child that serves no run, telling OnError what of it
// could not be removed.
func (p *Pool) discard(c *child) {
	c.stopWatch()
	if err := c.discard(); err != nil && p.opt.OnError != nil {
		p.opt.OnError(fmt.Errorf("discard an init stage started ahead: %w", err))
	}
}

// Resize changes how many children the pool keeps, killing those over the
// new size.
func (p *Pool) Resize(size int) {
	size = max(size, 0)
	var extra []*child
	p.mu.Lock()
	p.size = size
	for flags, q := range p.idle {
		if len(q) > size {
			extra = append(extra, q[size:]...)
			p.idle[flags] = q[:size]
		}
	}
	p.mu.Unlock()
	for _, c := range extra {
		p.discard(c)
	}
}

// Close kills and reaps every child in the pool, waiting for fills under
// way; later takes find none.
func (p *Pool) Close() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.fills.Wait()
	defer p.watchers.Wait()
	p.mu.Lock()
	idle := p.idle
	p.idle = map[uintptr][]*child{}
	p.mu.Unlock()
	for _, q := range idle {
		for _, c := range q {
			p.discard(c)
		}
	}
}

// Idle is how many started children the pool holds.
func (p *Pool) Idle() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, q := range p.idle {
		n += len(q)
	}
	return n
}
