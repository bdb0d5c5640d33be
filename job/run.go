package job

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"net"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
)

// Runner runs resolved jobs. One Runner serves a whole daemon; its fields
// are fixed after construction.
type Runner struct {
	// Install locates the runtimes; nil allows only native programs.
	Install *runtimes.Install
	// Cgroups creates the job cgroups; nil when the host has none usable.
	// A lazy one (cgroup.NewLazyManager, the CLI's) is proven by the run's
	// own cgroup: Run probes the host only when that cannot be made.
	Cgroups *cgroup.Manager
	// CgroupReason says why Cgroups is nil.
	CgroupReason string
	// Ceiling is the operator's, applied again to what the broker does.
	Ceiling Ceiling
	// Prober, when set, holds the host's probed posture (the daemon).
	Prober *posture.Prober
	// Pool, when set, supplies init stages started ahead of the runs (the
	// daemon's).
	Pool *jail.Pool
	// Warm, when set, keeps runtimes started ahead of the runs, whole
	// jails waiting for a job (the daemon's; see offerWarm).
	Warm *jail.Warm
	// Packages is the operator's package store, where the ceiling's
	// packages are (nil: none).
	Packages *packages.Store
	Logger   *slog.Logger

	filtersMu sync.Mutex
	filters   map[string]filter
}

// Options are per-run hooks: live output and logs, for the CLI's pass-through
// and the daemon's streaming.
type Options struct {
	Stdout, Stderr io.Writer
	OnLog          func(ipc.Log)
	// ID is the run's id when its caller gave it out before the run
	// (an async run's); empty, Run makes one.
	ID string
	// Owner is whose run it is (the daemon's tenant): a warm template the
	// run brings in counts against it (jail.WarmOptions.MaxTemplatesPerOwner).
	Owner string
	// Answer, when set, takes the result as soon as it is complete, which
	// a warm run's is before its jail's teardown (jail.Job.Answer). Run
	// still returns only once the jail is gone, with the same result,
	// which must not change after Answer; a run answered so is not
	// answered again, and Run returns the result without calling Answer
	// when it was not.
	Answer func(*jail.Result)
}

// NewID returns a fresh job id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run runs one resolved job and returns its one result. It never panics on
// the guest's account and always cleans up what it created.
//
// With a Prober (the daemon) the host's probed posture decides up front:
// mode required refuses without the core, auto leaves out what is missing.
// Without one (the CLI) every layer is tried; the init stage fails closed,
// and a lazy cgroup manager fails to make a cgroup where the probe would
// have failed, so a set-up failure means a layer is missing: the host is
// probed then, and the run is refused (required) or retried without it.
func (rn *Runner) Run(ctx context.Context, r *Resolved, opt Options) *jail.Result {
	start := time.Now()
	res := &jail.Result{ID: opt.ID, Logs: []jail.LogEntry{}}
	if res.ID == "" {
		res.ID = NewID()
	}
	logger := rn.logger().With("job", res.ID)
	// pooled: the run's init stage came from the daemon's pool;
	// pooledRoot: with the run's root mounted ahead. (The log's keys are
	// what operators and tests read.)
	var pooled, pooledRoot, warm, answered bool
	settle := func() {
		end := time.Now()
		res.Usage.WallMS = end.Sub(start).Milliseconds()
		res.StartedAt, res.FinishedAt = api.Time{Time: start}, api.Time{Time: end}
		res.Labels = r.Request.Labels
		logger.Info("run finished", "status", res.Status, "exit_code", res.ExitCode, "wall_ms", res.Usage.WallMS, "prestarted", pooled, "root_prepared", pooledRoot, "warm", warm,
			labelsAttr(r.Request.Labels))
	}
	defer func() {
		if !answered {
			settle()
		}
	}()
	// An answer before the jail's teardown (Options.Answer) comes from
	// within the attempt, on this goroutine.
	var answer func(*jail.Outcome)
	if opt.Answer != nil {
		answer = func(out *jail.Outcome) {
			pooled, pooledRoot, warm = out.Pooled, out.PooledRoot, out.Warm
			answered = true
			settle()
			opt.Answer(res)
		}
	}
	logger.Info("run starting", "spec", r.String())

	cgs := cgroups{mgr: rn.Cgroups, reason: rn.CgroupReason}
	var probed *posture.Probed
	switch {
	case rn.Prober != nil:
		probed = rn.Prober.Get(ctx)
	case r.Mode == ModeRequired && len(r.Required) > 0:
		// Layers beyond the core (Landlock, a cgroup controller, ...) are
		// not failed closed by the init stage: prove them before running.
		cgs = cgs.probed()
		probed = posture.Probe(ctx, cgs.options(rn.Install))
	}
	for {
		if probed != nil {
			report := probed.Report(r.Mode, r.Required)
			if report.Decision == "refuse" {
				rn.refuse(res, report, r.Request.Posture)
				return res
			}
			if !probed.Has(posture.MountNS) || !probed.Has(posture.PIDNS) {
				report.Decision = "refuse"
				report.Missing = []string{posture.MountNS, posture.PIDNS}
				rn.refuse(res, report, r.Request.Posture)
				res.Error.Message = "this host cannot build a jail: no mount or pid namespace"
				return res
			}
		}
		out := (&attempt{rn: rn, r: r, opt: opt, probed: probed, cgs: cgs, res: res, logger: logger, answer: answer}).run(ctx)
		pooled = out != nil && out.Pooled
		pooledRoot = out != nil && out.PooledRoot
		warm = out != nil && out.Warm
		if out == nil || out.InitStage == initstage.StageNone || probed != nil || !setupLayerFailure(out) {
			return res
		}
		logger.Warn("jail set-up failed; probing the host", "stage", out.InitStage, "layer", out.InitLayer, "err", out.Message)
		cgs = cgs.probed()
		probed = posture.Probe(ctx, cgs.options(rn.Install))
		*res = jail.Result{ID: res.ID, Logs: []jail.LogEntry{}}
	}
}

// cgroups is the cgroup manager a run uses, or why it has none.
type cgroups struct {
	mgr    *cgroup.Manager
	reason string
}

// probed returns the cgroups proven by the probe: a lazy manager (the
// CLI's) is replaced by a probed one, which leaves out what is unusable.
func (c cgroups) probed() cgroups {
	if c.mgr == nil {
		return c
	}
	m, err := c.mgr.Probed()
	if err != nil {
		return cgroups{reason: err.Error()}
	}
	return cgroups{mgr: m}
}

func (c cgroups) options(in *runtimes.Install) posture.Options {
	return posture.Options{Install: in, Cgroups: c.mgr, CgroupReason: c.reason}
}

// setupLayerFailure reports a set-up failure that a missing layer explains:
// a step that applies one (its layer), the start into the job's namespaces
// (one the kernel refused), or the run's own cgroup, which the host could
// not make: with a lazy manager (the CLI) that cgroup is the host's only
// cgroup probe.
func setupLayerFailure(out *jail.Outcome) bool {
	return out.InitLayer != "" || out.InitStage == initstage.StageStart || errors.Is(out.Err, cgroup.ErrNotSupported)
}

func (rn *Runner) refuse(res *jail.Result, report *posture.Report, detail string) {
	setStatus(res, jail.StatusRefused)
	res.Error = &jail.ErrorInfo{Code: "refused", Message: "mode required: missing layers: " + strings.Join(report.Missing, ", ")}
	res.Posture = report.API(detail)
}

// attempt is one try at running a resolved job, with the layers probed
// allows (all of them when probed is nil). It fills res.
type attempt struct {
	rn     *Runner
	r      *Resolved
	opt    Options
	probed *posture.Probed
	cgs    cgroups
	res    *jail.Result
	logger *slog.Logger
	// answer, when set, takes the result before the jail's teardown
	// (Options.Answer); answered says it did, and the result is final.
	answer   func(*jail.Outcome)
	answered bool
}

// run runs the job once, in four phases: resolve its launch, build its
// spec, run it in the jail, and assemble the result. It returns the
// jail's outcome, or nil when the run never reached the jail.
func (a *attempt) run(ctx context.Context) *jail.Outcome {
	launch, ok := a.launch()
	if !ok {
		return nil
	}
	spec, flt, ok := a.spec(launch)
	if !ok {
		return nil
	}
	out, broker, denials := a.contain(ctx, spec, launch, flt)
	// The jail made the job's cgroup and keeps it until the posture has
	// read its limits back.
	defer func() {
		if err := out.Release(); err != nil {
			a.logger.Error("remove job cgroup", "err", err)
		}
	}()
	if cgErr := out.CgroupErr; cgErr != nil {
		a.fail("cgroup", "%v", cgErr)
		if a.probed == nil && errors.Is(cgErr, cgroup.ErrNotSupported) {
			// Not proven before: Run probes the host and retries without
			// what cannot be used.
			code, _ := jail.StatusInternalError.ExitCode()
			return &jail.Outcome{Status: jail.StatusInternalError, ExitCode: code, InitStage: initstage.StageCgroup, Err: cgErr, Message: cgErr.Error()}
		}
		return nil
	}
	if !a.answered {
		a.assemble(out, launch, flt, broker, denials)
	}
	return out
}

// fail ends the attempt as pmjail's own failure.
func (a *attempt) fail(code, format string, args ...any) {
	setStatus(a.res, jail.StatusInternalError)
	a.res.Error = &jail.ErrorInfo{Code: code, Message: fmt.Sprintf(format, args...)}
}

// failProgram ends the attempt on a program the jail cannot run. A native
// program is the job's own bad input: refused with a shell's exit code,
// not pmjail's failure. A runtime's launch failing is pmjail's own (an
// incomplete install).
func (a *attempt) failProgram(code string, err error, exit int) {
	a.fail(code, "%v", err)
	if a.r.Request.Exec != nil {
		a.res.Status, a.res.ExitCode = jail.StatusRefused, exit
	}
}

// launch resolves what the run execs.
func (a *attempt) launch() (*runtimes.Launch, bool) {
	launch, err := a.rn.launch(a.r)
	if err != nil {
		exit, _ := jail.StatusRefused.ExitCode() // a bad --ro-bind
		switch {
		case errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound):
			exit = 127 // the program could not be found
		case errors.Is(err, fs.ErrPermission):
			exit = 126 // found, but not executable
		}
		a.failProgram("runtime", err, exit)
		return nil, false
	}
	return launch, true
}

// spec builds the jail's description of the run: its root and rlimits,
// its namespaces (less what the host lacks), its cgroup limits and its
// seccomp filter.
func (a *attempt) spec(launch *runtimes.Launch) (*specs.Spec, filter, bool) {
	rn, r, cgs := a.rn, a.r, a.cgs
	lim := r.Limits
	rootLimits := rootfs.Limits{
		TmpBytes:   int64(lim.Tmp),
		OpenFiles:  1024,
		FileBytes:  uint64(lim.Tmp),
		CPUSeconds: uint64(time.Duration(lim.CPUTime).Seconds()) + 2,
	}
	if cgs.mgr == nil || !cgs.mgr.Host().Has(cgroup.Pids) {
		// Every job has its own host uid, so RLIMIT_NPROC counts its own
		// tasks: the pids bound of last resort. The guest's own: the jail
		// adds its pid 1's share.
		rootLimits.Tasks = uint64(lim.Pids)
	}
	root, err := rootfs.NewSpec(launch, rootLimits)
	if err != nil {
		a.failProgram("spec", err, 126) // not a program this jail can execute
		return nil, filter{}, false
	}
	if rn.Install != nil {
		// Where no tree of links may stand for the libraries, each stays
		// bound by itself: the run works either way.
		_ = root.Link(rn.Install.StateDir)
	}
	spec := root.Spec
	var flt filter
	if a.probed == nil || a.probed.Has(posture.Seccomp) {
		if flt, err = rn.filter(r); err != nil {
			a.fail("seccomp", "%v", err)
			return nil, filter{}, false
		}
	}
	if a.probed != nil {
		degrade(spec, a.probed)
	}
	if cgs.mgr != nil {
		spec.Linux.Resources = resources(lim, cgs.mgr.Host())
	}
	return spec, flt, true
}

// broker is the host's end of a run's guest channel.
type broker struct {
	cfg ipc.SessionConfig
	// out is the session's outcome, once serve has returned.
	out ipc.Outcome
}

// serve serves the guest channel (jail.Job.Channel): jail.Run returns
// only after it has, so out is read once Run has returned.
func (b *broker) serve(ctx context.Context, conn net.Conn) error {
	b.out = ipc.Serve(ctx, conn, b.cfg)
	return b.out.ProtocolError
}

// contain runs the job in the jail: the jail makes its cgroup (see
// jail.Job.Cgroups), and the broker serves its guest channel.
func (a *attempt) contain(ctx context.Context, spec *specs.Spec, launch *runtimes.Launch, flt filter) (*jail.Outcome, *broker, *seccomp.Denials) {
	job, b, denials := a.jailJob(spec, launch, flt)
	reason := a.offerWarm(job, launch, b)
	if a.answer != nil {
		job.Answer = func(out *jail.Outcome) {
			a.assemble(out, launch, flt, b, denials)
			a.answered = true
			a.answer(out)
		}
	}
	out := jail.Run(ctx, job)
	if out.WarmReason == "" && !out.Warm {
		out.WarmReason = reason
	}
	return out, b, denials
}

// jailJob is the jail's description of the run, with the broker that
// serves its channel and the seccomp denials it counts.
func (a *attempt) jailJob(spec *specs.Spec, launch *runtimes.Launch, flt filter) (*jail.Job, *broker, *seccomp.Denials) {
	r, lim := a.r, a.r.Limits
	denials := &seccomp.Denials{}
	job := &jail.Job{
		ID:          a.res.ID,
		Spec:        spec,
		Files:       launch.Files,
		Stdin:       launch.Stdin,
		Seccomp:     flt.program,
		Landlock:    r.Profile.Landlock,
		Timeout:     time.Duration(lim.Timeout),
		CPUTime:     time.Duration(lim.CPUTime),
		OutputLimit: int64(lim.Output),
		Cgroups:     NewCgroups(a.cgs.mgr),
		Stdout:      a.opt.Stdout,
		Stderr:      a.opt.Stderr,
		Pool:        a.rn.Pool,
		Denials: func(ctx context.Context, fd int) {
			_ = denials.Serve(ctx, fd, flt.errno)
		},
	}
	b := &broker{}
	if launch.Channel {
		timing := "precise"
		if r.Profile.CoarseTime {
			timing = "coarse"
		}
		b.cfg = ipc.SessionConfig{
			Input:        r.Request.Input,
			Capabilities: r.Request.Capabilities,
			Ceiling:      a.rn.Ceiling.Broker,
			Timing:       timing,
			OnLog:        a.opt.OnLog,
			Logger:       a.logger,
		}
		// A plain script's runtime says how it exits before Deno's own
		// teardown (jail.Job.Exited).
		exited := make(chan int, 1)
		b.cfg.OnExit = func(code int) {
			select {
			case exited <- code:
			default:
			}
		}
		job.Exited = exited
		job.Channel = b.serve
	}
	return job, b, denials
}

// assemble fills the result from what the jail, its cgroup, the broker
// and the seccomp filter saw, and the run's posture.
func (a *attempt) assemble(out *jail.Outcome, launch *runtimes.Launch, flt filter, b *broker, denials *seccomp.Denials) {
	rn, r, res := a.rn, a.r, a.res
	cg, _ := out.Cgroup.(*cgroup.Group)
	usage := out.Usage
	if cg != nil {
		if out.UsageErr != nil {
			a.logger.Warn("read job cgroup usage", "err", out.UsageErr)
		}
		// The jail's pid 1 is no task of the guest's: its share of the
		// peak is the jail's to say (see resources).
		usage.PidsPeak -= min(usage.PidsPeak, out.InitTasks)
	}
	rn.assemble(res, r, out, &b.out, cg != nil, usage)
	res.Warm, res.WarmReason = out.Warm, out.WarmReason
	res.Denied = denials.Counts()
	if denials.Saturated() {
		// The supervisor stopped answering the filter's notifications:
		// the counts are lower bounds, later denials went unnamed.
		res.LimitsHit = appendOnce(res.LimitsHit, "denied_syscalls")
	}
	facts := rn.facts(r, out, a.cgs, cg, flt.program != nil)
	facts.DenoFlags = denoFlags(launch)
	facts.Start = launch.Start
	if a.probed != nil {
		facts.Host = &a.probed.Host
	}
	res.Posture = posture.ForRun(facts).API(r.Request.Posture)
}

// degrade leaves out of the spec the namespaces the host lacks (mode auto).
func degrade(spec *specs.Spec, probed *posture.Probed) {
	layer := map[specs.LinuxNamespaceType]string{
		specs.UserNamespace: posture.UserNS, specs.PIDNamespace: posture.PIDNS, specs.MountNamespace: posture.MountNS,
		specs.NetworkNamespace: posture.NetNS, specs.IPCNamespace: posture.IPCNS, specs.UTSNamespace: posture.UTSNS,
		specs.CgroupNamespace: posture.CgroupNS,
	}
	var kept []specs.LinuxNamespace
	for _, ns := range spec.Linux.Namespaces {
		if probed.Has(layer[ns.Type]) {
			kept = append(kept, ns)
		}
	}
	spec.Linux.Namespaces = kept
}

// denoFlags are the runtime's permission flags, for the posture.
func denoFlags(l *runtimes.Launch) []string {
	var flags []string
	for _, a := range l.Args {
		if strings.HasPrefix(a, "--no-") || strings.HasPrefix(a, "--allow-") || strings.HasPrefix(a, "--deny-") || strings.HasPrefix(a, "--cached-only") {
			flags = append(flags, a)
		}
	}
	return flags
}

// labelsAttr is the client's labels as one group, so that an operator can
// find a client's run in the log by its own tags. Validate bounded them
// (api.MaxLabels, each key and value short); a run without labels logs
// none (slog leaves an empty group out).
func labelsAttr(labels map[string]string) slog.Attr {
	attrs := make([]any, 0, len(labels))
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		attrs = append(attrs, slog.String(k, labels[k]))
	}
	return slog.Group("labels", attrs...)
}

func (rn *Runner) logger() *slog.Logger {
	if rn.Logger != nil {
		return rn.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// resources are the job's cgroup limits: memory without swap, tasks, and
// one core's worth of CPU, each where the host has its controller. A limit
// left out is a layer the run's posture reports missing (mode auto runs
// without it; mode required refuses first if it is required), and the
// tasks bound falls back to RLIMIT_NPROC. Either tasks bound is the
// guest's own: the jail adds the share of its own pid 1 (the init stage,
// the runtime's parent) wherever it writes the bound, and reports it
// (jail.Outcome.InitTasks) for the peak to leave out.
func resources(lim profiles.Limits, h *cgroup.Host) *specs.LinuxResources {
	r := &specs.LinuxResources{}
	if h.Has(cgroup.Memory) {
		mem := int64(lim.Memory)
		r.Memory = &specs.LinuxMemory{Limit: &mem, Swap: &mem}
	}
	if h.Has(cgroup.Pids) {
		pids := lim.Pids
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	if h.Has(cgroup.CPU) {
		quota, period := int64(100000), uint64(100000)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	return r
}
