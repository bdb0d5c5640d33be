package initstage

import (
	"errors"
	"os"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/runtimes/layout"
	"github.com/pmjail/pmjail/seccomp/bpf"
)

// step is one step of the init stage's set-up: the stage a failure of it
// reports, the layer it applies (see Layer), and what it does.
type step struct {
	stage Stage
	layer Layer
	run   func(*setup) error
}

// steps is the set-up, in the order it runs: nsjail's (contain.cc), read
// top to bottom. The root's file systems first, then the job's cgroup,
// which the supervisor makes meanwhile, then everything of the job's
// (files, copies, the channel), so that all it can grow is charged to the
// job; then the root is pivoted into and frozen, the process's own
// attributes set, every privilege dropped, and the seccomp filter
// installed last. After the table Main sends the report and starts the
// runtime (StageExec).
//
// A step with no layer fails for no lack of the host's: on the job's own
// input (its files, rlimits, bind sources) or a broken init stage. The
// rlimits step applies the rlimits layer, yet a refused limit is the
// job's, so it names none. no_new_privs has no step of its own: the
// privileges step sets it, between the id switch and the checks that
// nothing can be regained (and the Landlock step before it, as
// landlock_restrict_self requires).
var steps = []step{
	{StageConfig, "", (*setup).checkConfig},                       // a process to run
	{StageMountNS, LayerMountNS, (*setup).checkMountNS},           // never the host's mounts
	{StageCapabilities, "", (*setup).readLastCap},                 // from the host's /proc, before the pivot
	{StageRoot, LayerRootfs, (*setup).privateMounts},              // nothing propagates; the premounted root kept or undone
	{StageBindSource, "", (*setup).openSources},                   // before the tmpfs can hide one
	{StageRoot, LayerRootfs, (*setup).mountTmpfs},                 // the root's tmpfs
	{StageMounts, LayerRootfs, (*setup).mountAll},                 // binds through their fds, proc, tmpfs...
	{StageCgroup, "", (*setup).joinCgroup},                        // the supervisor's Join
	{StageFiles, "", (*setup).writeFiles},                         // charged to the job from here
	{StageMounts, LayerRootfs, (*setup).writeCopies},              // the per-run copies
	{StageChannel, "", (*setup).openChannel},                      // its FIFOs in the root
	{StagePivot, LayerRootfs, (*setup).pivot},                     // the old root detached
	{StageRoot, LayerRootfs, (*setup).readOnly},                   // unless the spec's root is writable
	{StageHostname, LayerUTSNS, (*setup).setHostname},             // in the job's UTS namespace
	{StageCgroupNS, LayerCgroupNS, (*setup).unshareCgroupNS},      // rooted at the job's cgroup, joined above
	{StageRlimits, "", (*setup).setRlimits},                       // the spec's
	{StageRlimits, "", (*setup).ordinaryPriority},                 // none of the supervisor's nice or OOM protection
	{StageFDs, "", (*setup).closeExtraFDs},                        // the guest inherits stdio and the channel alone
	{StageLandlock, LayerLandlock, (*setup).restrictFiles},        // never fails: the report says why not
	{StagePrivileges, LayerCapabilities, (*setup).dropPrivileges}, // and ids, no_new_privs, the death signal
	{StageSeccomp, LayerSeccomp, (*setup).installFilter},          // last
}

// setup is what the steps share: the supervisor's configuration, what
// earlier steps made, and the report they fill.
type setup struct {
	cfg *Config
	// premounted is the root mounted ahead (Premount), nil for none.
	premounted *premountedRoot
	// join waits for the supervisor's Join and joins the job's cgroups.
	join    func() error
	report  Report
	lastCap int
	// sources are the binds' and copies' sources, opened before the
	// root's tmpfs could hide one, in the mounts' order (-1 for others).
	sources []int
}

// setUp runs the steps on cfg, on the root premounted if it is the
// configuration's (nil: none); join places it in the job's cgroup (see
// Join). A failure is a *stageError naming the step.
func setUp(cfg *Config, premounted *premountedRoot, join func() error) (Report, error) {
	s := &setup{cfg: cfg, premounted: premounted, join: join}
	defer func() { closeFDs(s.sources) }()
	for _, st := range steps {
		if err := st.run(s); err != nil {
			return s.report, &stageError{stage: st.stage, layer: st.layer, err: err}
		}
	}
	return s.report, nil
}

func (s *setup) checkConfig() error {
	if p := s.cfg.Process; p == nil || len(p.Args) == 0 {
		return errors.New("no process to run")
	}
	return nil
}

func (s *setup) joinCgroup() error { return s.join() }

func (s *setup) setHostname() error {
	if !s.cfg.HasNamespace(specs.UTSNamespace) {
		return nil
	}
	return unix.Sethostname([]byte(s.cfg.Hostname))
}

// unshareCgroupNS roots a new cgroup namespace at the job's own cgroup,
// which this process has joined by now.
func (s *setup) unshareCgroupNS() error {
	if !s.cfg.HasNamespace(specs.CgroupNamespace) {
		return nil
	}
	return os.NewSyscallError("unshare", unix.Unshare(unix.CLONE_NEWCGROUP))
}

// restrictFiles applies a Landlock ruleset where the kernel has one; the
// report says which ABI, or why none (no error: posture reports it).
func (s *setup) restrictFiles() error {
	if !s.cfg.Landlock {
		return nil
	}
	var rw []string
	if s.cfg.Channel {
		rw = append(rw, layout.ChannelOut)
	}
	s.report.Landlock, s.report.LandlockReason = applyLandlock(s.cfg.Mounts, rw)
	return nil
}

// installFilter installs the seccomp filter, the last layer: after it only
// the report and execve. A filter with notifications hands its listener to
// the supervisor with the report.
func (s *setup) installFilter() error {
	if len(s.cfg.Seccomp) == 0 {
		return nil
	}
	var prog bpf.Program
	if err := prog.UnmarshalBinary(s.cfg.Seccomp); err != nil {
		return err
	}
	listener, err := bpf.Install(&prog)
	if err != nil {
		return err
	}
	if listener >= 0 {
		s.report.FDs = append(s.report.FDs, FDSeccomp)
		s.report.fds = append(s.report.fds, listener)
	}
	return nil
}

// Layers returns the layers the steps apply, in the steps' order, each
// once: those a caller may find missing on a host (see Layer).
func Layers() []Layer {
	var layers []Layer
	for _, st := range steps {
		if st.layer != "" && !slices.Contains(layers, st.layer) {
			layers = append(layers, st.layer)
		}
	}
	return layers
}
