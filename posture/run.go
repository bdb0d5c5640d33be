package posture

import (
	"fmt"
	"strings"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/netns"
)

// RunFacts is what a run knows about its own protection.
type RunFacts struct {
	Mode     string
	Required []string
	// Outcome is the jail's account of the run (nil for a run refused
	// before it started).
	Outcome *jail.Outcome
	// Seccomp says a filter was asked for.
	Seccomp bool
	// Cgroup is the job's cgroup, nil if it had none.
	Cgroup     *cgroup.Group
	CgroupHost *cgroup.Host
	// CgroupReason says why there is no cgroup.
	CgroupReason string
	// Runtime is "deno", "python" or "" for a native program; Start says
	// how it started (Python: "snapshot" or "cold: <why>").
	Runtime    string
	Start      string
	DenoFlags  []string
	CoarseTime bool
	// Host is the daemon's probed host information, if any.
	Host *Host
}

// ForRun builds a run's posture from what was read back from the contained
// process itself.
func ForRun(f RunFacts) *Report {
	r := &Report{Host: f.Host}
	if f.Runtime != "" {
		r.Runtime = &RunRuntime{Name: f.Runtime, Start: f.Start}
	}
	add := func(name string, st State, detail string) {
		r.Layers = append(r.Layers, Layer{Name: name, State: st, Core: isCore(name), Detail: detail})
	}
	out := f.Outcome
	var o *jail.Observed
	if out != nil {
		o = out.Observed
		r.Observed = o
	}
	// A process that ended before it could be read back still had every
	// layer the init stage applies: it fails closed before exec.
	verified := o != nil && o.Error == ""
	started := out != nil && out.InitStage == initstage.StageNone && out.Status != jail.StatusInternalError
	unread := "enforced by the init stage before exec (the process exited before it could be read back)"

	for _, ns := range namespaceProbes {
		key := nsKey(ns.name)
		switch {
		case verified && ns.name == NetNS && o.Network != nil:
			if o.Network.Isolated {
				add(ns.name, Applied, fmt.Sprintf("namespace inode %d holds only %s", o.Network.JobInode, interfaces(o.Network)))
			} else {
				add(ns.name, Missing, o.Network.Reason)
			}
		case verified && o.Namespaces[key]:
			add(ns.name, Applied, fmt.Sprintf("namespace inode %d differs from the supervisor's", o.NamespaceIDs[key]))
		case verified:
			add(ns.name, Missing, "the process shares the supervisor's namespace")
		case started:
			add(ns.name, Applied, unread)
		default:
			add(ns.name, Missing, "the run did not start")
		}
	}
	check := func(name string, ok bool, good, bad string) {
		switch {
		case verified && ok:
			add(name, Applied, good)
		case verified:
			add(name, Missing, bad)
		case started:
			add(name, Applied, unread)
		default:
			add(name, Missing, "the run did not start")
		}
	}
	// check reads the observed values only when verified: a zero Observed
	// stands in otherwise.
	obs := o
	if obs == nil {
		obs = &jail.Observed{}
	}
	check(Rootfs, obs.RootReadOnly, fmt.Sprintf("read-only tmpfs root with %d mounts", obs.Mounts), "the root is writable")
	if f.Seccomp {
		check(Seccomp, obs.Seccomp == 2, fmt.Sprintf("filter mode, %d filter(s); denials named in denied_syscalls", obs.SeccompFilters), fmt.Sprintf("Seccomp: %d", obs.Seccomp))
	} else {
		add(Seccomp, Missing, "no filter on this host")
	}
	check(NoNewPrivs, obs.NoNewPrivs, "NoNewPrivs: 1", "NoNewPrivs: 0")
	check(Capabilities, obs.NoCapabilities(), "CapEff, CapPrm, CapInh, CapBnd and CapAmb all empty", "capabilities left: CapEff "+obs.CapEff+" CapBnd "+obs.CapBnd)
	check(Rlimits, strings.HasPrefix(obs.CoreLimit, "0/"), "core "+obs.CoreLimit+", open files "+obs.NoFileLimit, "core dumps allowed")

	r.Cgroup, r.Layers = runCgroup(f, r.Layers)

	switch {
	case out != nil && out.Landlock >= 9:
		add(Landlock, Applied, fmt.Sprintf("ABI %d: read-only root, writable /tmp only, no TCP, scoped signals and abstract sockets, no connecting to Unix sockets made outside the job", out.Landlock))
	case out != nil && out.Landlock > 0:
		add(Landlock, Applied, fmt.Sprintf("ABI %d: read-only root, writable /tmp only, no TCP, scoped signals and abstract sockets", out.Landlock))
	case out != nil && out.LandlockReason != "":
		add(Landlock, Missing, out.LandlockReason)
	default:
		add(Landlock, Off, "not asked for by the profile")
	}
	if f.Runtime != "" {
		add(DenoPermissions, Applied, strings.Join(f.DenoFlags, " "))
	} else {
		add(DenoPermissions, Off, "a native program: no runtime permission layer")
	}
	if f.CoarseTime {
		// The mitigation lives in the guest's bootstrap, on the main
		// thread: nothing reaches a Worker's clock or the shared memory
		// WebAssembly makes, so it cannot be called applied.
		add(Timing, Degraded, "main thread only: performance.now() at 1 ms, no SharedArrayBuffer constructor; "+
			"a Worker keeps the precise clock, shared WebAssembly memory is still a SharedArrayBuffer, "+
			"process.hrtime() and performance marks read the precise clock")
	} else {
		add(Timing, Off, "precise clocks (opt-in via the profile's coarse_time)")
	}
	r.decide(f.Mode, f.Required)
	return r
}

func nsKey(layer string) string {
	switch layer {
	case UserNS:
		return "user"
	case PIDNS:
		return "pid"
	case MountNS:
		return "mnt"
	case NetNS:
		return "net"
	case IPCNS:
		return "ipc"
	case UTSNS:
		return "uts"
	}
	return "cgroup"
}

// runCgroup reports the job's cgroup and the limits read back from it.
func runCgroup(f RunFacts, layers []Layer) (Cgroup, []Layer) {
	if f.Cgroup == nil {
		reason := f.CgroupReason
		if reason == "" {
			reason = "no cgroup"
		}
		return Cgroup{Mechanic: "none", Reason: reason}, append(layers, noCgroupLayers(reason)...)
	}
	paths := f.Cgroup.Paths()
	info := Cgroup{Mechanic: f.CgroupHost.Mode.String(), Paths: paths}
	v2 := f.CgroupHost.Mode == cgroup.V2
	dir := func(ctl string) (string, bool) {
		if v2 {
			d, ok := paths[cgroup.UnifiedKey]
			return d, ok
		}
		d, ok := paths[ctl]
		return d, ok
	}
	type limit struct{ layer, ctl, v1, v2 string }
	for _, l := range []limit{
		{CgroupMemory, cgroup.Memory, "memory.limit_in_bytes", "memory.max"},
		{CgroupPids, cgroup.Pids, "pids.max", "pids.max"},
		{CgroupCPU, cgroup.CPU, "cpu.cfs_quota_us", "cpu.max"},
	} {
		d, ok := dir(l.ctl)
		if !ok || !f.CgroupHost.Has(l.ctl) {
			detail := "controller unavailable"
			if f.CgroupHost.Reason != "" {
				detail += ": " + f.CgroupHost.Reason
			}
			layers = append(layers, Layer{Name: l.layer, State: Missing, Detail: detail})
			continue
		}
		file := l.v1
		if v2 {
			file = l.v2
		}
		// The limit binds the process only if the process is in the cgroup:
		// checked against what the kernel says of the process itself.
		if o := f.observed(); o != nil {
			if at, ok := memberOf(o.Cgroups, l.ctl, d, v2); !ok {
				layers = append(layers, Layer{Name: l.layer, State: Missing, Detail: fmt.Sprintf("the process is in %q, not in %s", at, d)})
				continue
			}
		}
		layers = append(layers, Layer{Name: l.layer, State: Applied, Detail: fmt.Sprintf("%s = %s (%s)", file, readLimit(d, file), d)})
	}
	return info, layers
}

// observed is the contained process as read back, nil if it was not.
func (f RunFacts) observed() *jail.Observed {
	if f.Outcome == nil || f.Outcome.Observed == nil || f.Outcome.Observed.Error != "" {
		return nil
	}
	return f.Outcome.Observed
}

// memberOf says whether /proc/<pid>/cgroup lines place the process in dir
// for controller ctl (v1) or in the unified hierarchy (v2), and where the
// process is instead. Paths there are relative to the reader's cgroup
// namespace, so dir (a mount path) must end with them.
func memberOf(lines []string, ctl, dir string, v2 bool) (string, bool) {
	at := ""
	for _, line := range lines {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		mine := parts[1] == "" && parts[0] == "0"
		if !v2 {
			mine = false
			for _, c := range strings.Split(parts[1], ",") {
				mine = mine || c == ctl
			}
		}
		if !mine {
			continue
		}
		at = parts[2]
		if at != "/" && strings.HasSuffix(dir, at) {
			return at, true
		}
	}
	return at, false
}

func interfaces(r *netns.Report) string {
	var names []string
	for _, i := range r.Interfaces {
		state := "down"
		if i.Up {
			state = "up"
		}
		names = append(names, i.Name+" ("+state+")")
	}
	if len(names) == 0 {
		return "no interface"
	}
	return strings.Join(names, ", ")
}
