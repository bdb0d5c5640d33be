package job

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"regexp"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/runtimes"
)

// offerWarm offers job to the daemon's warm runtimes (Runner.Warm): it
// sets the job's WarmJob (its jail with everything of the job's taken out,
// the template a warm runtime is started from, and that template's key)
// and the channel that sends the program in the start frame. It returns
// why the job cannot be offered ("" when it was, or when there are no
// warm runtimes at all).
//
// A warm runtime's jail is the job's own but for: the job's files (its
// program travels in the start frame and is evaluated from memory, so
// nothing of the job is written into a root handed over before the job
// was known), the cgroup's limits (written when the run takes it), V8's
// heap cap (the cgroup alone bounds memory: a warm runtime cannot know its
// job's memory limit), and RLIMIT_CPU (the cgroup's CPU time, counted from
// the take, bounds it; the rlimit is the backstop of hosts without a
// cgroup, which keep no warm runtimes). Everything else — namespaces,
// mounts, seccomp filter, Landlock, the other rlimits, Deno's flags — is
// in the key, so that a job is served only by a runtime whose jail is
// exactly its own, a mode required job's layers included.
func (a *attempt) offerWarm(job *jail.Job, launch *runtimes.Launch, b *broker) string {
	rn, r := a.rn, a.r
	switch {
	case rn.Warm == nil:
		return ""
	case r.Request.Exec != nil:
		return "native programs are not served warm"
	case r.Runtime != runtimes.Deno && r.Runtime != runtimes.Python:
		return fmt.Sprintf("%s runs are not served warm", r.Runtime)
	case job.Cgroups == nil || job.Spec.Linux.Resources == nil || job.Spec.Linux.Resources.Memory == nil:
		return "no cgroup memory controller: a warm runtime's only memory bound is its cgroup's"
	case !launch.Channel || job.Channel == nil:
		return "the run has no guest channel"
	case len(job.GuestOwned) > 0:
		return "the run writes host directories"
	case r.Request.TypeCheck:
		// The checker reads the job's file in the root before it runs.
		return "type-checked runs are not served warm"
	case r.Request.Files != nil:
		// Relative imports resolve against files in the root.
		return "several-file jobs are not served warm"
	case r.Request.Stdin != "" || len(r.Request.Env) > 0:
		// stdin is a file of the root and env the process's own: both
		// are the job's, and a warm runtime holds nothing of a job.
		return "jobs with stdin or env are not served warm"
	case r.Runtime == runtimes.Deno && importMeta.MatchString(r.Request.Source):
		// A warm runtime evaluates the program as a blob: module, whose
		// import.meta.url is that blob: URL (and filename and dirname
		// undefined), where a cold run's names the job's file.
		return "programs that read import.meta are not served warm"
	}
	src := &ipc.StartSource{Text: r.Request.Source, MediaType: runtimes.DialectOf(r.Request.Runtime).MediaType()}
	text, err := json.Marshal(src)
	if err != nil {
		return "the program cannot travel in the start frame: " + err.Error()
	}
	// The start frame also holds the input and the capabilities.
	if max := rn.Ceiling.Broker.WithDefaults().MaxFrame; len(text)+len(r.Request.Input)+64<<10 > max {
		return fmt.Sprintf("the program and input do not fit the start frame's %d bytes", max)
	}
	tmpl, key, err := warmTemplate(job, rn.Warm.Knows)
	if err != nil {
		return "no template for a warm runtime: " + err.Error()
	}
	cfg := b.cfg
	cfg.Source = src
	// The pool read the runtime's ready frame before it kept it idle.
	cfg.ReadySeen = true
	job.Warm = rn.Warm
	job.WarmJob = &jail.WarmJob{Key: key, Class: string(r.Runtime), Template: tmpl, Owner: a.opt.Owner}
	job.WarmChannel = func(ctx context.Context, conn net.Conn) error {
		b.out = ipc.Serve(ctx, conn, cfg)
		return b.out.ProtocolError
	}
	return ""
}

// importMeta finds a program's use of import.meta (a comment or string
// that names it only costs that run its warm runtime).
var importMeta = regexp.MustCompile(`\bimport\s*\.\s*meta\b`)

// readyTimeout bounds a warm runtime's start, to its ready frame: Deno's
// takes milliseconds and Pyodide's snapshot restore a fraction of a
// second, so one still silent after this is stuck, and is discarded
// rather than kept waiting.
const readyTimeout = 30 * time.Second

// warmTemplate is job's jail with everything of the job's taken out (see
// offerWarm), and its key: a hash of all the template holds. The template
// itself, a copy of the job's spec that shares nothing with it, is made
// only when known says the pool has none of that key (nil otherwise): a
// run served by a known template pays for the key alone.
func warmTemplate(job *jail.Job, known func(key string) bool) (*jail.Job, string, error) {
	spec, err := warmSpec(job.Spec)
	if err != nil {
		return nil, "", err
	}
	// The job directory stays, empty: a guest lists or stats it as in a
	// cold run, where it holds the job's files (a guest reading it must
	// meet the same filter, not a missing directory).
	files := []runtimes.File{{Path: runtimes.JobDir, Mode: os.ModeDir | 0o755}}
	for _, f := range job.Files {
		if !strings.HasPrefix(f.Path, runtimes.JobDir+"/") {
			files = append(files, f)
		}
	}
	h := sha256.New()
	// The JSON value ends where it ends; the filter, raw, after its length.
	if err := json.NewEncoder(h).Encode(struct {
		Spec     *specs.Spec
		Files    []runtimes.File
		Landlock bool
	}{spec, files, job.Landlock}); err != nil {
		return nil, "", err
	}
	h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(job.Seccomp))))
	h.Write(job.Seccomp)
	key := hex.EncodeToString(h.Sum(nil))
	if known(key) {
		return nil, key, nil
	}
	// The view shares the job spec's nested values: the template, which
	// outlives the run, gets a copy of its own.
	data, err := json.Marshal(spec)
	if err != nil {
		return nil, "", err
	}
	own := &specs.Spec{}
	if err := json.Unmarshal(data, own); err != nil {
		return nil, "", err
	}
	tmpl := &jail.Job{
		ID:       "warm",
		Spec:     own,
		Files:    files,
		Seccomp:  job.Seccomp,
		Landlock: job.Landlock,
		Cgroups:  job.Cgroups,
		// Never called: a warm runtime's channel is served by the run
		// that takes it (Job.WarmChannel); the template only says the
		// runtime has one.
		Channel: func(context.Context, net.Conn) error { return nil },
		Ready: func(ctx context.Context, conn net.Conn) error {
			return ipc.AwaitReady(ctx, conn, readyTimeout)
		},
	}
	return tmpl, key, nil
}

// warmSpec is a view of the job's spec without what a template leaves
// out: no cgroup limits, no RLIMIT_CPU, no V8 heap cap. It copies what it
// changes and shares the rest with spec.
func warmSpec(spec *specs.Spec) (*specs.Spec, error) {
	if spec.Linux == nil || spec.Process == nil {
		return nil, fmt.Errorf("the spec has no process or no linux section")
	}
	view := *spec
	linux := *spec.Linux
	linux.Resources = &specs.LinuxResources{}
	view.Linux = &linux
	proc := *spec.Process
	proc.Rlimits = nil
	for _, l := range spec.Process.Rlimits {
		if l.Type != "RLIMIT_CPU" {
			proc.Rlimits = append(proc.Rlimits, l)
		}
	}
	proc.Args = nil
	for _, arg := range spec.Process.Args {
		if flags, ok := strings.CutPrefix(arg, "--v8-flags="); ok {
			var kept []string
			for _, f := range strings.Split(flags, ",") {
				if !strings.HasPrefix(f, "--max-old-space-size=") {
					kept = append(kept, f)
				}
			}
			if len(kept) == 0 {
				continue
			}
			arg = "--v8-flags=" + strings.Join(kept, ",")
		}
		proc.Args = append(proc.Args, arg)
	}
	view.Process = &proc
	return &view, nil
}

// Prewarm has the warm runtimes of rt ("deno", "python") started for the
// default profile and limits before any run asks for them (a daemon's
// start): the template is that of a job with the default profile, limits
// and options. Jobs of other profiles and options teach the pool their
// own with their first run.
func (rn *Runner) Prewarm(ctx context.Context, rt string) error {
	if rn.Warm == nil || rn.Warm.Size(rt) == 0 {
		return nil
	}
	// The program is never run nor kept: a template holds none.
	r, err := Resolve(&Request{Runtime: rt, Source: "0"}, rn.Ceiling, false)
	if err != nil {
		return err
	}
	var probed *posture.Probed
	if rn.Prober != nil {
		probed = rn.Prober.Get(ctx)
		if report := probed.Report(r.Mode, r.Required); report.Decision == "refuse" {
			return fmt.Errorf("prewarm %s: the default profile is refused here: missing %v", rt, report.Missing)
		}
	}
	a := &attempt{rn: rn, r: r, probed: probed, cgs: cgroups{mgr: rn.Cgroups, reason: rn.CgroupReason},
		res: &jail.Result{ID: "warm"}, logger: rn.logger()}
	launch, ok := a.launch()
	if !ok {
		return fmt.Errorf("prewarm %s: %s", rt, a.res.Error.Message)
	}
	spec, flt, ok := a.spec(launch)
	if !ok {
		return fmt.Errorf("prewarm %s: %s", rt, a.res.Error.Message)
	}
	job, b, _ := a.jailJob(spec, launch, flt)
	if reason := a.offerWarm(job, launch, b); reason != "" {
		return fmt.Errorf("prewarm %s: %s", rt, reason)
	}
	rn.Warm.Learn(job.WarmJob)
	return nil
}
