package job

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
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
	Cgroups *cgroup.Manager
	// CgroupReason says why Cgroups is nil.
	CgroupReason string
	// Ceiling is the operator's, applied again to what the broker does.
	Ceiling Ceiling
	Logger  *slog.Logger

	filtersMu sync.Mutex
	filters   map[string][]byte
}

// Options are per-run hooks: live output and logs, for the CLI's pass-through
// and the daemon's streaming.
type Options struct {
	Stdout, Stderr io.Writer
	OnLog          func(ipc.Log)
}

// NewID returns a fresh job id.
func NewID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Run runs one resolved job and returns its one result. It never panics on
// the guest's account and always cleans up what it created.
func (rn *Runner) Run(ctx context.Context, r *Resolved, opt Options) *jail.Result {
	start := time.Now()
	res := &jail.Result{ID: NewID(), Logs: []jail.LogEntry{}}
	logger := rn.logger().With("job", res.ID)
	defer func() {
		res.Usage.WallMS = time.Since(start).Milliseconds()
		logger.Info("run finished", "status", res.Status, "exit_code", res.ExitCode, "wall_ms", res.Usage.WallMS)
	}()
	logger.Info("run starting", "job", r.String())

	refuse := func(missing []string, why string) *jail.Result {
		res.Status, res.ExitCode = jail.StatusRefused, 125
		res.Error = &jail.ErrorInfo{Code: "refused", Message: why}
		res.Posture = rn.posture(r, nil, nil, missing)
		return res
	}
	fail := func(code, format string, args ...any) *jail.Result {
		res.Status, res.ExitCode = jail.StatusInternalError, 125
		res.Error = &jail.ErrorInfo{Code: code, Message: fmt.Sprintf(format, args...)}
		return res
	}

	if missing := rn.missingRequired(r); len(missing) > 0 {
		return refuse(missing, "mode required: missing layers: "+strings.Join(missing, ", "))
	}
	launch, err := rn.launch(r)
	if err != nil {
		return fail("runtime", "%v", err)
	}
	lim := r.Limits
	rootLimits := jail.RootLimits{
		TmpBytes:   int64(lim.Tmp),
		OpenFiles:  1024,
		FileBytes:  uint64(lim.Tmp),
		CPUSeconds: uint64(time.Duration(lim.CPUTime).Seconds()) + 2,
	}
	if rn.Cgroups == nil || !rn.Cgroups.Host().Has(cgroup.Pids) {
		// Every job has its own host uid, so RLIMIT_NPROC counts its own
		// tasks: the pids bound of last resort.
		rootLimits.Tasks = uint64(lim.Pids)
	}
	spec, err := jail.NewSpec(launch, rootLimits)
	if err != nil {
		return fail("spec", "%v", err)
	}
	filter, err := rn.filter(r)
	if err != nil {
		return fail("seccomp", "%v", err)
	}

	var cg *cgroup.Job
	if rn.Cgroups != nil {
		spec.Linux.Resources = resources(lim)
		cg, err = rn.Cgroups.Create(res.ID, spec.Linux.Resources)
		if err != nil {
			return fail("cgroup", "%v", err)
		}
		defer func() {
			if err := cg.Delete(); err != nil {
				logger.Error("remove job cgroup", "err", err)
			}
		}()
	}

	var denials seccomp.Denials
	var outcome ipc.Outcome
	job := &jail.Job{
		ID:          res.ID,
		Spec:        spec,
		Files:       launch.Files,
		Seccomp:     filter,
		Landlock:    r.Profile.Landlock,
		Timeout:     time.Duration(lim.Timeout),
		CPUTime:     time.Duration(lim.CPUTime),
		OutputLimit: int64(lim.Output),
		Stdout:      opt.Stdout,
		Stderr:      opt.Stderr,
		Denials: func(ctx context.Context, fd int) {
			_ = denials.Serve(ctx, fd, 0)
		},
	}
	if cg != nil {
		job.Cgroup = cgroupJob{cg}
	}
	if r.Request.Exec == nil {
		timing := "precise"
		if r.Profile.CoarseTime {
			timing = "coarse"
		}
		job.Channel = func(ctx context.Context, conn net.Conn) error {
			outcome = ipc.Serve(ctx, conn, ipc.SessionConfig{
				Input:        r.Request.Input,
				Capabilities: r.Request.Capabilities,
				Ceiling:      rn.brokerCeiling(r),
				Timing:       timing,
				OnLog:        opt.OnLog,
				Logger:       logger,
			})
			return outcome.ProtocolError
		}
	}

	out := jail.Run(ctx, job)

	var usage cgroup.Usage
	if cg != nil {
		if usage, err = cg.Stats(); err != nil {
			logger.Warn("read job cgroup usage", "err", err)
		}
	}
	rn.assemble(res, r, out, &outcome, cg != nil, usage)
	res.Denied = denials.Counts()
	res.Posture = rn.posture(r, out, cg, nil)
	return res
}

// cgroupJob adapts a job cgroup to what the jail drives.
type cgroupJob struct{ *cgroup.Job }

func (c cgroupJob) CPUTime() (time.Duration, error) {
	u, err := c.Stats()
	return u.CPUTime, err
}

func (rn *Runner) logger() *slog.Logger {
	if rn.Logger != nil {
		return rn.Logger
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// resources are the job's cgroup limits: memory without swap, tasks, and
// one core's worth of CPU.
func resources(lim profiles.Limits) *specs.LinuxResources {
	mem := int64(lim.Memory)
	quota, period, pids := int64(100000), uint64(100000), lim.Pids
	return &specs.LinuxResources{
		Memory: &specs.LinuxMemory{Limit: &mem, Swap: &mem},
		Pids:   &specs.LinuxPids{Limit: &pids},
		CPU:    &specs.LinuxCPU{Quota: &quota, Period: &period},
	}
}
