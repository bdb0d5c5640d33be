package jail

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/cleanup"
	"github.com/pmjail/pmjail/internal/kfile"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/runtimes"
)

// Job is one resolved run: what to exec, in which root, under which limits.
type Job struct {
	ID string
	// Spec is the OCI description of the process, hostname, mounts and
	// rlimits. Namespaces are always all of them; see cloneFlags. Its
	// Linux.Resources are the limits of the job's cgroup.
	Spec *specs.Spec
	// Files are written into the job's root (bootstrap and source).
	Files []runtimes.File
	// Stdin is the file of Files the guest reads as standard input;
	// empty for /dev/null.
	Stdin string
	// Seccomp is a compiled filter program (package seccomp), nil for none.
	Seccomp []byte
	// Landlock adds a Landlock ruleset where the kernel has one.
	Landlock bool

	Timeout     time.Duration
	CPUTime     time.Duration
	OutputLimit int64

	// Cgroups, when set, makes the job's cgroup (nil: the run has none).
	// Where the child must be born in it (Cgroups.AtBirth: cgroup v2) that
	// is before the child starts; otherwise while the child starts and the
	// init stage mounts the root, joining only then (see initstage.Join):
	// with a core to spare the cgroup costs the run little. A run that takes
	// a pooled child adopts the cgroup the child waits with instead
	// (PoolOptions.Cgroups) and gives it the job's limits meanwhile. Either
	// way Run returns only once the cgroup is made, and the Outcome holds it
	// until Release; a cgroup not made ends the run at stage "cgroup"
	// (Outcome.CgroupErr).
	Cgroups Cgroups
	// Channel, when set, serves the host end of the guest channel once the
	// guest runs; Run returns only after it has. A non-nil error ends the
	// run as a protocol error.
	Channel func(ctx context.Context, conn net.Conn) error
	// Exited, when set, delivers the guest's word on its channel that its
	// runtime is exiting with a code and runs nothing of the guest's any
	// more (ipc.SessionConfig.OnExit). The supervisor then kills the jail
	// at once: the runtime's own teardown (its heap, its caches, its
	// threads) is milliseconds of a warm run that nothing reads. The run
	// still ends only once every process of the jail is gone and its
	// output drained, and its exit code is the one said, unless a limit
	// or a cancellation ended it first.
	Exited <-chan int
	// Answer, when set, takes a warm run's outcome before its teardown:
	// once the guest said how it exits (Exited), the supervisor kills the
	// jail, drains the output, and hands Answer the outcome, complete,
	// with the cgroup still held; Run returns the same outcome, unchanged,
	// once the jail is gone. A run it cannot answer so (a step not done in
	// a bounded time) does not call it.
	Answer func(*Outcome)
	// Denials, when set, receives the seccomp listener fd and serves it
	// until ctx ends; it owns (closes) the fd.
	Denials func(ctx context.Context, listener int)
	// Stdout and Stderr, when set, receive the guest's output as it comes
	// (up to the output limit), besides the captured copy.
	Stdout, Stderr io.Writer
	// Pool, when set, supplies an init stage started ahead of the run.
	Pool *Pool
	// Warm, when set with WarmJob, supplies a runtime started ahead of the
	// run, its jail built from WarmJob.Template (see Warm); WarmChannel then
	// serves its channel instead of Channel, sending the job's program in
	// the start frame. A run no warm runtime serves runs as without them,
	// and the outcome says why (Outcome.WarmReason).
	Warm        *Warm
	WarmJob     *WarmJob
	WarmChannel func(ctx context.Context, conn net.Conn) error
	// Ready, on a warm template (WarmJob.Template), waits on the channel
	// for the runtime's word that it has started and waits for its start
	// frame, until ctx ends: a runtime is idle, and a run may take it,
	// only once Ready returned nil. Until then its threads and its
	// start's CPU time are not all there.
	Ready func(ctx context.Context, conn net.Conn) error
	// GuestOwned are host directories the guest writes through writable
	// binds of the spec (a cache warm run's DENO_DIR): Run gives each to
	// the guest's host id, leased for the run, before the root is built
	// (see giveToGuest).
	GuestOwned []string
}

// Outcome is how the contained process ended, before the caller adds what
// the broker and the posture say.
type Outcome struct {
	Status    Status
	ExitCode  int
	Signal    string
	Message   string
	Stdout    string
	Stderr    string
	Truncated Truncated
	Wall      time.Duration
	// CPU and MaxRSS come from the kernel's rusage of the init process, for
	// hosts without a cgroup.
	CPU    time.Duration
	MaxRSS uint64
	// Observed is the child's real state, read back once it runs.
	Observed *Observed
	// Landlock is the ABI version the init stage enforced (0: none).
	Landlock       int
	LandlockReason string
	// LimitsHit names the limits the jail itself enforced.
	LimitsHit []string
	// InitStage names the set-up step that failed, for internal errors
	// (StageBindSource among them), and InitLayer the layer that step
	// applies: a host without it fails there (see initstage.Layer).
	InitStage initstage.Stage
	InitLayer initstage.Layer
	// Err is the supervisor's own error behind a failed set-up (nil when
	// the init stage reported it), for errors.Is: a cgroup the host cannot
	// make wraps cgroup.ErrNotSupported.
	Err error
	// Pooled says the init stage came from a Pool, started before the
	// run; PooledRoot that its root was mounted then too.
	Pooled     bool
	PooledRoot bool
	// Warm says a warm runtime served the run (Job.Warm); WarmReason why
	// none did, when the job offered itself to one.
	Warm       bool
	WarmReason string
	// InitTasks is pid 1's share of the job's tasks: how many of the
	// tasks its bound counts were the init stage's own as its runtime
	// started, which the jail added to the spec's bound wherever it wrote
	// it (the cgroup's pids limit, RLIMIT_NPROC) and which Usage.PidsPeak
	// holds besides the guest's: one task on cgroup v1 and under
	// RLIMIT_NPROC, as many as the start gate counted on cgroup v2 (see
	// gate_linux.go). It is set on every host.
	InitTasks uint64

	// Cgroup is the job's cgroup (Job.Cgroups), nil if the run had none.
	// It stays until Release, for the caller to read its limits back.
	Cgroup Cgroup
	// CgroupErr is why the job's cgroup could not be made, or given its
	// limits; the run then ended at stage "cgroup".
	CgroupErr error
	// Usage is the cgroup's account of the run, read once nothing of the
	// job was left in it; UsageErr is why it could not be read.
	Usage    cgroup.Usage
	UsageErr error
}

// StageBindSource is the set-up step that opens the binds' sources: a run
// failed there named a source the jail's unprivileged ids cannot open.
const StageBindSource = initstage.StageBindSource

// killReason is why the supervisor ended a run early.
type killReason struct {
	status Status
	limit  string
	msg    string
}

// Run starts job's contained child, waits for it under the job's limits,
// kills whatever is left of it and returns how it ended. It always cleans up
// what it created, but for the job's cgroup, which the outcome holds until
// its Release.
func Run(ctx context.Context, job *Job) *Outcome {
	s := &supervision{job: job, out: &Outcome{}, runtime: -1, started: time.Now()}
	s.run(ctx)
	if !s.answered {
		s.out.Wall = time.Since(s.started)
		s.account()
	}
	return s.out
}

// initStageEnv is the init stage's environment (the runtime gets the
// spec's). Its work is a few milliseconds on one thread: one P and no
// collector spare it the runtime's extra threads, their wake-ups and a GC
// cycle (−0.9 ms a run, measured); the memory limit still bounds its heap.
var initStageEnv = []string{"GOMAXPROCS=1", "GOGC=off", "GOMEMLIMIT=64MiB"}

// supervision is one run under way. Its phases, in order: start (a child,
// and the job's cgroup), handOver (the child's set-up), supervise (the
// guest under its limits), finish (the outcome), and account (the
// cgroup's usage).
type supervision struct {
	job *Job
	out *Outcome

	mu     sync.Mutex
	reason *killReason
	// child is the run's init stage, then its runtime: fixed before
	// anything can stop the run.
	child *child
	// cgroup is the job's cgroup once it exists (under mu: a stop may
	// come while it is being made).
	cgroup Cgroup
	// runtime is a pidfd of the runtime, the init stage's child, once it
	// runs (-1 before, and after it was read back).
	runtime int
	// making delivers the job's cgroup while it is made (or adopted);
	// handOver takes it, and settleCgroup if nothing did.
	making chan madeCgroup
	// keepListener keeps the seccomp listener in listener (a warm
	// runtime's, for its later run) instead of serving it.
	keepListener bool
	listener     int
	// cpuBase is the cgroup's CPU time when the run took a warm runtime:
	// the runtime's own start, not the job's.
	cpuBase time.Duration
	// said is the exit code the guest said it exits with (Job.Exited), once
	// the supervisor killed the jail for it.
	said *int
	// started is when the run began (Outcome.Wall); answered that
	// Job.Answer has the outcome, which is not to change after.
	started  time.Time
	answered bool
}

func (s *supervision) cg() Cgroup {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cgroup
}

// ownCgroup makes the job's cgroup, once made, the run's: the supervisor
// kills through it, and the outcome holds it (or why it was not made).
func (s *supervision) ownCgroup(made madeCgroup) {
	s.mu.Lock()
	s.cgroup = made.cg
	s.mu.Unlock()
	s.out.Cgroup, s.out.CgroupErr = made.cg, made.err
}

// makeCgroup makes the job's cgroup (or gives an adopted one its limits)
// while the child starts and mounts the root; handOver takes the result.
func (s *supervision) makeCgroup(fn func() madeCgroup) {
	s.making = make(chan madeCgroup, 1)
	go func() { s.making <- fn() }()
}

// awaitCgroup waits for the cgroup being made, if one is, and makes it
// the run's.
func (s *supervision) awaitCgroup() {
	if s.making == nil {
		return
	}
	made := <-s.making
	s.making = nil
	s.ownCgroup(made)
}

// stop records the first reason to end the run and kills the tree.
func (s *supervision) stop(r killReason) {
	s.note(r)
	s.killTree()
}

// note records r as the reason the run ended, unless it had one.
func (s *supervision) note(r killReason) {
	s.mu.Lock()
	if s.reason == nil {
		s.reason = &r
	}
	s.mu.Unlock()
}

func (s *supervision) killTree() {
	// The child is pid 1 of its pid namespace, the runtime's parent:
	// killing it kills every process in the namespace.
	_ = s.child.proc.Signal(syscall.SIGKILL)
	if cg := s.cg(); cg != nil {
		_ = cg.Kill()
	}
}

func (s *supervision) fail(stage initstage.Stage, err error) {
	s.out.Status = StatusInternalError
	s.out.ExitCode, _ = StatusInternalError.ExitCode()
	s.out.InitStage = stage
	s.out.Err = err
	s.out.Message = fmt.Sprintf("%s: %v", stage, err)
}

func (s *supervision) run(ctx context.Context) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	flags := cloneFlags(s.job.Spec)
	// A run the pool cannot serve neither takes from it nor fills it.
	pool := s.job.Pool
	if !pool.serves(s.job) {
		pool = nil
	}
	// What the run holds goes back last to first, whichever phase ends it.
	var cu cleanup.Cleanup
	defer cu.Clean()
	// A run that ends may leave a core spare that its start did not: the
	// last runs of a burst top the pool up for the next, which would
	// otherwise start cold.
	cu.Add(func() { pool.replenish(flags) })
	// Run returns only once the job's cgroup is made, and owns it.
	cu.Add(s.awaitCgroup)
	if s.job.Warm != nil && s.job.WarmJob != nil {
		key := s.job.WarmJob.Key
		cu.Add(func() { s.job.Warm.replenish(key) })
		if s.runWarm(ctx, cancel, &cu) {
			return
		}
	}
	c := s.start(pool, flags)
	if c == nil {
		return
	}
	cu.Add(c.lease.release)
	cu.Add(func() { c.ctl.Close() })
	cu.Add(s.closeRuntime) // a set-up that failed after the exec
	s.child = c
	s.out.InitTasks = c.initTasks // the start gate may count it anew

	// The wall clock covers everything from here, set-up included.
	timer := time.AfterFunc(s.job.Timeout, func() {
		s.stop(killReason{status: StatusTimeout, limit: "wall", msg: fmt.Sprintf("wall-clock limit of %s exceeded", s.job.Timeout)})
	})
	cu.Add(func() { timer.Stop() })
	out := s.capture()
	conn, setupErr := s.handOver(ctx)
	pool.replenish(flags)
	if setupErr != nil {
		s.killTree()
		_, _ = c.proc.Wait()
		out.wait()
		// The guest may have started, and hit the output limit, before the
		// hand-over ended (pid 1 starts it before it reports).
		s.takeOutput(out)
		// A limit or a cancellation that ended the set-up is the reason,
		// not the broken pipe it left behind.
		s.applyStopReason()
		return
	}
	end := s.supervise(ctx, cancel, conn, out, &cu)
	if !s.answered {
		s.finish(end.state, end.err, out)
	}
}

// start takes a pooled child or starts one, and starts making the job's
// cgroup: before a child that must be born in it, beside one that joins
// it at hand-over. It returns nil when the run ended there.
func (s *supervision) start(pool *Pool, flags uintptr) *child {
	job := s.job
	c := pool.take(flags, pool.plan(job))
	switch {
	case c != nil && c.cgroup != nil:
		// The pooled child's cgroup becomes the job's, whatever its
		// limits' fate: the outcome owns it from here.
		cg := c.cgroup
		c.cgroup = nil
		s.makeCgroup(func() madeCgroup { return madeCgroup{cg, cg.SetLimits(beforeStart(job))} })
	case job.Cgroups == nil:
	case c == nil && job.Cgroups.AtBirth():
		cg, err := job.Cgroups.Make(job.ID, beforeStart(job))
		s.ownCgroup(madeCgroup{cg, err})
		if err != nil {
			s.fail(initstage.StageCgroup, err)
			return nil
		}
	default:
		s.makeCgroup(func() madeCgroup {
			cg, err := job.Cgroups.Make(job.ID, beforeStart(job))
			return madeCgroup{cg, err}
		})
	}
	if c != nil {
		s.out.Pooled = true
		return c
	}
	c, stage, err := startChild(flags, s.cg())
	if err != nil {
		s.fail(stage, err)
		return nil
	}
	return c
}

// outputs are the child's two output streams, drained as they come.
type outputs struct {
	stdout, stderr *capture
	streams        []*stream
	drained        sync.WaitGroup
}

// wait waits until both streams are drained (the child's tree is gone).
func (o *outputs) wait() { o.drained.Wait() }

// capture drains the child's output into captures bounded by the output
// limit, whose overflow stops the run.
func (s *supervision) capture() *outputs {
	job, c := s.job, s.child
	out := &outputs{
		stdout: &capture{limit: job.OutputLimit, live: job.Stdout},
		stderr: &capture{limit: job.OutputLimit, live: job.Stderr},
	}
	onOverflow := func() {
		s.stop(killReason{status: StatusOutputLimit, limit: "output", msg: fmt.Sprintf("output limit of %d bytes exceeded", job.OutputLimit)})
	}
	for _, st := range []*stream{{r: c.stdout, c: out.stdout}, {r: c.stderr, c: out.stderr}} {
		st.asked, st.gone = make(chan chan error, 1), make(chan struct{})
		out.streams = append(out.streams, st)
		out.drained.Add(1)
		go func() {
			defer out.drained.Done()
			st.read(onOverflow)
		}()
	}
	return out
}

// exit is how the child's wait ended.
type exit struct {
	state *os.ProcessState
	err   error
}

// supervise serves the guest channel and holds the running guest to its
// limits until the child exits; then it kills what is left and waits for
// the output and the session to end. cu takes what must outlive it until
// the run ends.
func (s *supervision) supervise(ctx context.Context, cancel context.CancelFunc, conn net.Conn, out *outputs, cu *cleanup.Cleanup) exit {
	job, proc := s.job, s.child.proc
	// The broker's session ends on its own when the guest's end closes, and
	// Run waits for it: its outcome is part of the run's.
	var session sync.WaitGroup
	if conn != nil {
		session.Add(1)
		go func() {
			defer session.Done()
			defer conn.Close()
			serve := job.Channel
			if s.out.Warm {
				serve = job.WarmChannel
			}
			if err := serve(ctx, conn); err != nil {
				s.stop(killReason{status: StatusProtocolError, msg: err.Error()})
			}
		}()
		// The session's first step is the guest's start frame: it goes
		// before the read-back below, which would otherwise hold this
		// thread while the new goroutine waits for it, or for an idle
		// thread to wake.
		runtime.Gosched()
	}
	// The runtime is running. Its state is read back while the guest
	// starts (the guest waits for nothing of this), and before anything
	// reaps it: a reaped pid can be another process's.
	if s.out.Observed == nil { // a warm runtime's was read once it was ready
		s.out.Observed = s.observeRuntime()
	}
	// Holding the job's mount namespace moves its teardown (every mount,
	// the tmpfs's pages, an RCU grace period) out of the runtime's exit,
	// which the result waits for, to after the result.
	if ns, err := unix.Open("/proc/"+strconv.Itoa(proc.Pid)+"/ns/mnt", unix.O_RDONLY|unix.O_CLOEXEC, 0); err == nil {
		cu.Add(func() { go unix.Close(ns) })
	}
	waited := make(chan exit, 1)
	go func() {
		state, err := proc.Wait()
		waited <- exit{state, err}
	}()
	sessionDone := make(chan struct{})
	go func() { session.Wait(); close(sessionDone) }()
	end, said := s.enforce(ctx, waited)
	if said {
		end = s.answer(waited, out, sessionDone)
	}
	// Nothing of the job may outlive Run.
	s.killTree()
	out.wait()
	// The guest is gone: the session drains what it sent and ends at EOF,
	// unless it is stuck in a call on the guest's behalf.
	select {
	case <-sessionDone:
	case <-time.After(2 * time.Second):
		cancel()
		<-sessionDone
	}
	return end
}

// enforce waits for the child's exit, stopping the run when ctx ends or
// the job's cgroup has used its CPU time. It returns early, said true,
// when the guest said how it exits and the run is answered before its
// teardown (answersEarly): the child still runs.
func (s *supervision) enforce(ctx context.Context, waited <-chan exit) (exit, bool) {
	job := s.job
	var cpuTick <-chan time.Time
	var check *time.Timer
	cg := s.cg()
	rate := cpuRate()
	if cg != nil && job.CPUTime > 0 {
		check = time.NewTimer(untilCPULimit(job.CPUTime, rate))
		defer check.Stop()
		cpuTick = check.C
	}
	// Each stop happens once: a done context or a passed limit stays that
	// way, and its case is switched off (a nil channel) after it fires.
	done := ctx.Done()
	exited := job.Exited
	for {
		select {
		case end := <-waited:
			return end, false
		case code := <-exited:
			exited = nil
			s.said = &code
			if s.answersEarly() {
				return exit{}, true
			}
			// pid 1's death ends every process of the namespace; the
			// cgroup's kill, which waits for them, waits below (the
			// caller's killTree), once the wait has seen pid 1 gone.
			_ = s.child.proc.Signal(syscall.SIGKILL)
		case <-done:
			done = nil
			s.stop(cancelled(ctx))
		case <-cpuTick:
			used, err := cg.CPUTime()
			switch {
			case err == nil && used-s.cpuBase >= job.CPUTime:
				cpuTick = nil
				s.stop(s.cpuLimit())
			case err == nil:
				check.Reset(untilCPULimit(job.CPUTime-(used-s.cpuBase), rate))
			default:
				check.Reset(minCPUCheck)
			}
		}
	}
}

// minCPUCheck is the shortest wait between two reads of a job's CPU time:
// how far past its limit a job may run, at its CPU rate.
const minCPUCheck = 25 * time.Millisecond

// untilCPULimit is how long a job with left of its CPU time can run
// before it may have used it, at rate CPUs: no read of its CPU time is
// needed before (a hello never needs one), and at least minCPUCheck. A
// rate of 0 (unknown) reads it every minCPUCheck.
func untilCPULimit(left time.Duration, rate float64) time.Duration {
	if rate <= 0 {
		return minCPUCheck
	}
	return max(time.Duration(float64(left)/rate), minCPUCheck)
}

// cpuRate is how many CPUs a job's tasks can use at once, at most: every
// online CPU of the host. (Not its CPU quota, which a burst within one
// period exceeds, nor this process's affinity, which a guest's
// sched_setaffinity may widen within its cgroup's CPU set.) 0 if unknown.
var cpuRate = sync.OnceValue(func() float64 {
	data, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		return 0
	}
	n := 0
	for part := range strings.SplitSeq(strings.TrimSpace(string(data)), ",") {
		lo, hi, ranged := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if ranged {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return float64(n)
})

// cpuLimit is why a run that used its CPU time stops.
func (s *supervision) cpuLimit() killReason {
	return killReason{status: StatusCPULimit, limit: "cpu", msg: fmt.Sprintf("CPU-time limit of %s exceeded", s.job.CPUTime)}
}

// cancelled is why a run whose context ended stops. A cancelled context
// is its caller giving up (a client gone, a shutdown): status cancelled.
// A deadline is not: the run's own wall-clock limit should have ended it
// first, so a deadline that did is pmjail's fault.
func cancelled(ctx context.Context) killReason {
	cause := context.Cause(ctx)
	if errors.Is(cause, context.DeadlineExceeded) {
		return killReason{status: StatusInternalError, msg: "run cancelled: " + cause.Error()}
	}
	return killReason{status: StatusCancelled, msg: "run cancelled: " + cause.Error()}
}

// account reads the job cgroup's usage into the outcome, once the run
// has ended and nothing of the job is left in it.
func (s *supervision) account() {
	if s.out.Cgroup == nil || s.out.CgroupErr != nil {
		return
	}
	s.out.Usage, s.out.UsageErr = s.out.Cgroup.Stats()
	s.out.Usage.CPUTime = max(s.out.Usage.CPUTime-s.cpuBase, 0)
}

// handOver sends the child its configuration, places it in its cgroup and
// follows its set-up until it has exec'd the runtime. It returns the host
// end of the guest channel when the job has one.
func (s *supervision) handOver(ctx context.Context) (net.Conn, error) {
	job, c := s.job, s.child
	ctl := c.ctl
	hostMountNS, err := ownMountNS()
	if err != nil {
		s.fail(initstage.StageHostMountNS, err)
		return nil, err
	}
	if err := giveToGuest(job.GuestOwned, c.lease.guestID()); err != nil {
		s.fail(initstage.StageGuestOwned, err)
		return nil, err
	}
	cfg := configFor(job, c, hostMountNS)
	if err := sendConfig(ctl, &cfg); err != nil {
		s.fail(initstage.StageSendConfig, err)
		return nil, err
	}
	// The init stage mounts the root meanwhile; it waits for the join
	// before it writes anything of the job's.
	s.awaitCgroup()
	if err := s.out.CgroupErr; err != nil {
		s.fail(initstage.StageCgroup, err)
		return nil, err
	}
	// A join that failed killed the child; a report it sent before (a
	// set-up that failed first) still says why.
	joinErr := s.placeInCgroup()
	report, fds, err := initstage.ReadReport(int(ctl.Fd()))
	if err != nil {
		// A join that found the init stage gone says nothing about the
		// cgroup.
		if joinErr != nil && !peerGone(joinErr) {
			s.fail(initstage.StageCgroup, joinErr)
			return nil, joinErr
		}
		s.fail(initstage.StageInit, s.initFailure(err))
		return nil, err
	}
	if report.Error == "" && joinErr != nil {
		report.Error, report.Stage = joinErr.Error(), initstage.StageCgroup
	}
	if report.Error != "" {
		for _, fd := range fds {
			unix.Close(fd)
		}
		s.out.Status = StatusInternalError
		s.out.ExitCode, _ = StatusInternalError.ExitCode()
		s.out.InitStage, s.out.InitLayer = report.Stage, report.Layer
		s.out.Message = "jail set-up failed: " + report.Error
		return nil, errors.New(report.Error)
	}
	s.out.Landlock, s.out.LandlockReason = report.Landlock, report.LandlockReason
	s.out.PooledRoot = report.Premounted
	conn := s.hostEnds(ctx, report.FDs, fds)
	if cfg.AwaitStart {
		if err := s.openGate(); err != nil {
			if conn != nil {
				conn.Close()
			}
			s.fail(initstage.StageCgroup, err)
			return nil, err
		}
	}
	// The init stage starts the runtime as its child and reports it
	// running (with a pidfd of it) or not executable.
	after, afterFDs, err := initstage.ReadReport(int(ctl.Fd()))
	if err == nil && !after.Started && after.Error == "" {
		err = errors.New("neither a started runtime nor an exec error in the init stage's report")
	}
	if err != nil || after.Error != "" {
		closeFDs(afterFDs)
		if conn != nil {
			conn.Close()
		}
		if err != nil {
			s.fail(initstage.StageExec, s.initFailure(err))
			return nil, err
		}
		s.out.Status = StatusInternalError
		s.out.ExitCode = after.ExitCode
		s.out.InitStage, s.out.InitLayer = after.Stage, after.Layer
		s.out.Message = after.Error
		return nil, errors.New(after.Error)
	}
	s.takeRuntime(after.FDs, afterFDs)
	return conn, nil
}

// configFor is the init stage's configuration for job, run by child c:
// the guest runs under the guest ids of c's lease.
func configFor(job *Job, c *child, hostMountNS uint64) initstage.Config {
	cfg := initstage.ConfigFor(job.Spec)
	proc := *cfg.Process
	proc.User = specs.User{UID: guestID, GID: guestID}
	if !cfg.HasNamespace(specs.UserNamespace) {
		// Without a user namespace the guest takes the lease's host ids
		// directly: still unprivileged and unique to this job.
		proc.User = specs.User{UID: uint32(c.lease.guestID()), GID: uint32(c.lease.guestID())}
	}
	// pid 1's thread with the guest's ids counts under the guest's
	// RLIMIT_NPROC: the bound leaves it room.
	proc.Rlimits = tasksRlimits(proc.Rlimits)
	cfg.Process = &proc
	cfg.Files, cfg.Seccomp, cfg.HostMountNS = job.Files, job.Seccomp, hostMountNS
	cfg.Landlock, cfg.Channel, cfg.Stdin = job.Landlock, job.Channel != nil, job.Stdin
	cfg.AwaitStart = awaitsStart(job)
	return cfg
}

// takeRuntime keeps, of the fds the init stage sent with its exec report
// by their names, the pidfd of the runtime; it closes the others.
func (s *supervision) takeRuntime(names []string, fds []int) {
	s.runtime = -1
	for i, fd := range fds {
		if i < len(names) && names[i] == initstage.FDRuntime && s.runtime < 0 {
			s.runtime = fd
		} else {
			unix.Close(fd)
		}
	}
}

// hostEnds takes the fds the init stage sent with its set-up report, by
// their names: the seccomp listener goes to Job.Denials, and the guest
// channel's two fifos become its host end, returned (nil: none).
func (s *supervision) hostEnds(ctx context.Context, names []string, fds []int) net.Conn {
	job := s.job
	named := map[string]*os.File{}
	for i, fd := range fds {
		if i < len(names) {
			named[names[i]] = os.NewFile(uintptr(fd), names[i])
		} else {
			unix.Close(fd)
		}
	}
	if f := named[initstage.FDSeccomp]; f != nil {
		if s.keepListener {
			if fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0); err == nil {
				s.listener = fd
			}
		} else if job.Denials != nil {
			// The server owns the fd from here. Close-on-exec, as every fd
			// of the supervisor's: a child started meanwhile (the daemon's
			// next init stage) must not hold a copy, which would keep the
			// listener open once the server closes it (seccomp.NotifyBudget)
			// and leave the guest's calls waiting for an answer.
			fd, err := unix.FcntlInt(f.Fd(), unix.F_DUPFD_CLOEXEC, 0)
			if err == nil {
				go job.Denials(ctx, fd)
			}
		}
		f.Close()
	}
	in, out := named[initstage.FDChannelIn], named[initstage.FDChannelOut]
	for _, f := range []*os.File{in, out} {
		if f != nil {
			growPipe(f)
		}
	}
	if in != nil && out != nil {
		return &fifoConn{r: out, w: in}
	}
	for _, f := range []*os.File{in, out} {
		if f != nil {
			f.Close()
		}
	}
	return nil
}

// observeRuntime reads the runtime's state back, through the pidfd of it
// the init stage sent: its pid as this process sees it, and after the read
// whether that is still its (a runtime reaped meanwhile leaves its pid to
// any process). Without a pidfd it reads nothing.
func (s *supervision) observeRuntime() *Observed {
	defer s.closeRuntime()
	return s.readRuntime()
}

// readRuntime is observeRuntime without closing the pidfd: a warm
// runtime's stays open for its run's answer, which kills the runtime
// through it.
func (s *supervision) readRuntime() *Observed {
	if s.runtime < 0 {
		return &Observed{Error: "the init stage sent no pidfd of the runtime"}
	}
	pid := pidfdPid(s.runtime)
	if pid <= 0 {
		return &Observed{Error: "the runtime exited before it was read back"}
	}
	o := observe(pid)
	if pidfdPid(s.runtime) != pid {
		return &Observed{PID: pid, Error: "the runtime exited while it was read back"}
	}
	return o
}

// closeRuntime closes the runtime's pidfd, once: read back or not.
func (s *supervision) closeRuntime() {
	if s.runtime >= 0 {
		unix.Close(s.runtime)
		s.runtime = -1
	}
}

// pidfdPid is the pid of pidfd's process in this process's pid namespace,
// from its fdinfo: -1 once it has been reaped, 0 if unknown.
func pidfdPid(pidfd int) int {
	data, err := kfile.Read("/proc/self/fdinfo/" + strconv.Itoa(pidfd))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			pid, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return 0
			}
			return pid
		}
	}
	return 0
}

// exitReport is how the runtime ended as the init stage reported it
// before it exited itself; ok is false when there is none (the init stage
// was killed, or ended otherwise).
func (s *supervision) exitReport() (initstage.Report, bool) {
	rep, fds, err := initstage.ReadReport(int(s.child.ctl.Fd()))
	closeFDs(fds)
	return rep, err == nil && rep.Exited
}

// sendConfig sends the init stage its configuration, one message.
func sendConfig(ctl *os.File, cfg *initstage.Config) error {
	data, err := cfg.MarshalBinary()
	if err != nil {
		return err
	}
	return initstage.SendMessage(int(ctl.Fd()), data, nil)
}

// placeInCgroup sends the init stage its join (initstage.Join): on cgroup
// v1 with the task files it joins through; a v2 child not born in its
// cgroup (clone3 refused) is moved in first. On failure it kills the
// child, which would otherwise wait for the join.
func (s *supervision) placeInCgroup() error {
	c := s.child
	var tasks []*os.File
	if cg := s.cg(); cg != nil && !c.intoCgroup {
		files, err := cg.TaskFiles()
		if err == nil {
			tasks = files
			defer closeAll(tasks)
		} else if err := cg.AddProc(c.proc.Pid); err != nil {
			s.killTree()
			return err
		}
	}
	data, err := (&initstage.Join{TaskFiles: len(tasks)}).MarshalBinary()
	if err != nil {
		s.killTree()
		return err
	}
	fds := make([]int, len(tasks))
	for i, f := range tasks {
		fds[i] = int(f.Fd())
	}
	if err := initstage.SendMessage(int(c.ctl.Fd()), data, fds); err != nil {
		s.killTree()
		return fmt.Errorf("send join: %w", err)
	}
	return nil
}

// initFailure explains an init stage that died without a report.
func (s *supervision) initFailure(err error) error {
	if errors.Is(err, io.EOF) || peerGone(err) {
		return errors.New("init stage exited during set-up")
	}
	return err
}

// peerGone reports an error of a control socket whose other end is closed
// (a join left unread makes the kernel reset the connection).
func peerGone(err error) bool {
	return errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET)
}

// takeOutput puts what the streams kept, and whether each was cut, in the
// outcome; the streams are drained.
func (s *supervision) takeOutput(o *outputs) {
	s.out.Stdout, s.out.Stderr = o.stdout.text(), o.stderr.text()
	s.out.Truncated = Truncated{Stdout: o.stdout.truncated, Stderr: o.stderr.truncated}
}

// finish turns the child's end into the outcome.
func (s *supervision) finish(ps *os.ProcessState, waitErr error, o *outputs) {
	s.takeOutput(o)
	out := s.out
	// lost is set when the init stage ended without its report of the
	// runtime's end.
	var lost error
	if ps != nil {
		out.CPU = ps.UserTime() + ps.SystemTime()
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			out.MaxRSS = uint64(ru.Maxrss) * 1024
		}
		if ws, ok := ps.Sys().(syscall.WaitStatus); ok {
			switch {
			case ws.Exited():
				// The init stage exits with the runtime's code, and says
				// which signal ended it, if one did.
				out.ExitCode = ws.ExitStatus()
				if rep, ok := s.exitReport(); ok {
					out.ExitCode = rep.ExitCode
					if rep.Signal != 0 {
						out.Signal = unix.SignalName(syscall.Signal(rep.Signal))
					}
				} else {
					lost = fmt.Errorf("%w (exit status %d)", ErrInitEnded, out.ExitCode)
				}
			case ws.Signaled():
				out.Signal = unix.SignalName(ws.Signal())
				out.ExitCode = 128 + int(ws.Signal())
				lost = fmt.Errorf("%w (killed by %s)", ErrInitEnded, out.Signal)
			}
		}
	} else if waitErr != nil {
		s.fail(initstage.StageWait, waitErr)
		return
	}
	if s.applyStopReason() {
		return
	}
	if s.said != nil && out.Signal == "SIGKILL" {
		// The supervisor's own kill, after the guest said how it exits.
		out.ExitCode, out.Signal = *s.said, ""
		lost = nil
	}
	if lost != nil {
		// Not the guest's end: pid 1 cannot be signalled from its own
		// namespace, and the supervisor kills it only with a reason
		// (above). Something outside the run killed it (an operator, the
		// kernel's OOM killer), or it failed itself; what the runtime
		// did is unknown.
		out.Status, out.Err = StatusInternalError, lost
		out.ExitCode, _ = StatusInternalError.ExitCode()
		out.Signal = ""
		out.Message = lost.Error()
		return
	}
	if out.Signal == "SIGXCPU" && s.cpuRlimitReached(out.CPU) {
		out.Status = StatusCPULimit
		out.ExitCode, _ = out.Status.ExitCode()
		out.LimitsHit = append(out.LimitsHit, "cpu")
		out.Message = fmt.Sprintf("CPU-time limit of %s exceeded", s.job.CPUTime)
		return
	}
	if out.ExitCode == 0 {
		out.Status = StatusOK
	} else {
		out.Status = StatusError
	}
}

// cpuRlimitReached reports whether used, the CPU time of the init
// process and of what it reaped (the runtime among them), shows the job's
// CPU time spent, as a SIGXCPU that is RLIMIT_CPU's implies: the guest may
// send itself one (kill is in the native policy), and a run that died of
// it after a millisecond of CPU was reported as its CPU-time limit passed.
// The kernel signals at the soft limit by its tick-sampled clock, which
// the rusage (scheduler time) may trail by ticks: the bound is the job's
// CPU time, which the soft limit exceeds by seconds (job.spec), or, for a
// job without one, the soft limit less a second.
func (s *supervision) cpuRlimitReached(used time.Duration) bool {
	if s.job.CPUTime > 0 {
		return used >= s.job.CPUTime
	}
	if s.job.Spec == nil || s.job.Spec.Process == nil {
		return false
	}
	for _, l := range s.job.Spec.Process.Rlimits {
		if l.Type == "RLIMIT_CPU" {
			soft := time.Duration(l.Soft) * time.Second
			return l.Soft > 0 && used >= soft-min(time.Second, soft/2)
		}
	}
	return false
}

// applyStopReason makes the outcome the first reason the supervisor had
// to stop the run, if it had one, and reports whether it did.
func (s *supervision) applyStopReason() bool {
	s.mu.Lock()
	reason := s.reason
	s.mu.Unlock()
	if reason == nil {
		return false
	}
	out := s.out
	out.Status = reason.status
	out.Message = reason.msg
	out.InitStage, out.InitLayer, out.Err = initstage.StageNone, "", nil
	if reason.limit != "" {
		out.LimitsHit = append(out.LimitsHit, reason.limit)
	}
	if code, ok := reason.status.ExitCode(); ok {
		out.ExitCode = code
	}
	return true
}

func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, os.NewSyscallError("socketpair", err)
	}
	return os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "child"), nil
}

func nsInode(pid, ns string) (uint64, error) {
	var st unix.Stat_t
	path := "/proc/" + pid + "/ns/" + ns
	if err := unix.Stat(path, &st); err != nil {
		return 0, os.NewSyscallError("stat "+path, err)
	}
	return st.Ino, nil
}

// cloneFlags are the namespaces the spec asks for, except the cgroup
// namespace, which the init stage enters once it is in the job's cgroup.
func cloneFlags(spec *specs.Spec) uintptr {
	var flags uintptr
	for _, ns := range spec.Linux.Namespaces {
		switch ns.Type {
		case specs.UserNamespace:
			flags |= unix.CLONE_NEWUSER
		case specs.PIDNamespace:
			flags |= unix.CLONE_NEWPID
		case specs.MountNamespace:
			flags |= unix.CLONE_NEWNS
		case specs.NetworkNamespace:
			flags |= unix.CLONE_NEWNET
		case specs.IPCNamespace:
			flags |= unix.CLONE_NEWIPC
		case specs.UTSNamespace:
			flags |= unix.CLONE_NEWUTS
		}
	}
	return flags
}

func closeAll(files []*os.File) {
	for _, f := range files {
		f.Close()
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}

// channelPipeSize is the capacity of the channel's two FIFOs. The host
// writes the start frame as the runtime starts: with this much room a
// megabyte of input is all in the pipe while Deno is still starting, and
// the guest takes it in two reads, where a pipe's default 64 KiB held the
// host's write back until the guest read, sixteen hand-offs between the
// processes after its start (through the CLI, 1 MB of input added ~6–13
// ms against ~10–58, interleaved). The other way, the guest's log notes
// (ipc/PROTOCOL.md) need no reply, and a guest logging faster than a busy
// host reads no longer waits for it once 64 KiB are queued (900 calls of
// 1 KB: ~26 against ~57 µs a call). The kernel allocates a pipe's pages
// as they are written, charged to the writer's memory cgroup (the guest's
// to its job's limit), and frees them as they are read: the room costs
// nothing until used. It is fs.pipe-max-size's default.
const channelPipeSize = 1 << 20

// growPipe gives f, a pipe, channelPipeSize of room when it can. A pipe
// it cannot grow works as it is, only slower for a large frame.
func growPipe(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Control(func(fd uintptr) {
		_, _ = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, channelPipeSize)
	})
}
