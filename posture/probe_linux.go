package posture

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
)

// ProbeRole is argv[1] of pmjail's own binary when it runs as a probe's
// throwaway child; main dispatches it to ProbeChild.
const ProbeRole = "__pmjail_probe"

// Probed is what the probes proved about this host.
type Probed struct {
	Layers []Layer
	Cgroup Cgroup
	Host   Host
	At     time.Time
	// Incomplete says why the probe could not finish (its jail failed, it
	// timed out or was cancelled): the layers it left unproven say nothing
	// of the host. Empty for a probe that ran to its end.
	Incomplete string
	// Notes are what a Prober kept from merging this probe with what was
	// proven before (a layer a later probe failed to prove again).
	Notes []string
}

// Report is the host's posture in a mode; extra adds layers to what
// required insists on.
func (p *Probed) Report(mode string, extra []string) *Report {
	r := &Report{Layers: append([]Layer(nil), p.Layers...), Cgroup: p.Cgroup, Host: &p.Host, ProbedAt: p.At,
		Notes: append([]string(nil), p.Notes...)}
	r.decide(mode, extra)
	return r
}

// Has reports whether the probes proved the named layer.
func (p *Probed) Has(name string) bool {
	for _, l := range p.Layers {
		if l.Name == name {
			return l.State == Applied
		}
	}
	return false
}

// Options say where the runtimes and cgroups are.
type Options struct {
	Install *runtimes.Install
	// Cgroups is the supervisor's manager, nil when it could not be made
	// (CgroupReason says why).
	Cgroups      *cgroup.Manager
	CgroupReason string
}

var namespaceProbes = []struct {
	name string
	flag uintptr
	typ  specs.LinuxNamespaceType
}{
	{UserNS, 0, specs.UserNamespace},
	{PIDNS, unix.CLONE_NEWPID, specs.PIDNamespace},
	{MountNS, unix.CLONE_NEWNS, specs.MountNamespace},
	{NetNS, unix.CLONE_NEWNET, specs.NetworkNamespace},
	{IPCNS, unix.CLONE_NEWIPC, specs.IPCNamespace},
	{UTSNS, unix.CLONE_NEWUTS, specs.UTSNamespace},
	{CgroupNS, unix.CLONE_NEWCGROUP, specs.CgroupNamespace},
}

// Probe proves each layer on this host by trying it: every namespace in a
// throwaway child, then a whole jail around pmjail's own probe role, which
// checks from inside that its root is read-only and its privileges gone.
func Probe(ctx context.Context, opt Options) *Probed {
	p := &Probed{At: time.Now().UTC()}
	layers := map[string]Layer{}
	set := func(name string, st State, detail string) {
		layers[name] = Layer{Name: name, State: st, Core: isCore(name), Detail: detail}
	}

	var namespaces []specs.LinuxNamespaceType
	for _, ns := range namespaceProbes {
		if err := probeNamespace(ctx, ns.flag); err != nil {
			set(ns.name, Missing, err.Error())
			continue
		}
		set(ns.name, Applied, "a throwaway child entered a new one")
		namespaces = append(namespaces, ns.typ)
	}

	p.Host = hostInfo(opt.Install)
	filter, filterErr := nativeFilter()
	if filterErr != nil {
		set(Seccomp, Missing, filterErr.Error())
	}
	switch {
	case !slices.Contains(namespaces, specs.MountNamespace) || !slices.Contains(namespaces, specs.PIDNamespace):
		for _, l := range []string{Rootfs, Seccomp, NoNewPrivs, Capabilities, Rlimits, Landlock} {
			set(l, Missing, "no jail can be built without mount and pid namespaces")
		}
	default:
		inside, out, err := probeJail(ctx, namespaces, filter)
		if err != nil && filter != nil && out != nil && out.InitStage == initstage.StageSeccomp {
			set(Seccomp, Missing, "installing the filter failed: "+out.Message)
			inside, out, err = probeJail(ctx, namespaces, nil)
		}
		if err != nil {
			p.Incomplete = "the probe jail failed: " + err.Error()
			for _, l := range []string{Rootfs, Seccomp, NoNewPrivs, Capabilities, Rlimits, Landlock} {
				if _, done := layers[l]; !done {
					set(l, Missing, "the probe jail failed: "+err.Error())
				}
			}
			break
		}
		judge(set, inside, out, filter != nil, layers)
	}

	cg := cgroupLayers(opt)
	p.Cgroup = cg.info
	for _, l := range cg.layers {
		layers[l.Name] = l
	}
	if opt.Install != nil {
		// Not probed: a Deno run per probe would cost more than the probe.
		set(DenoPermissions, Applied, "not probed: rests on Deno's own checks of the flags pmjail passes (--no-prompt; reads only its bootstrap, the job and its assets), which each run's posture lists")
	} else {
		set(DenoPermissions, Missing, "no runtime installed")
	}
	set(Timing, Off, "opt-in per profile (coarse_time)")

	for _, name := range Names {
		if l, ok := layers[name]; ok {
			p.Layers = append(p.Layers, l)
		}
	}
	// A probe cut short may have failed any of its steps for that reason
	// alone, not for the host's.
	if ctx.Err() != nil && p.Incomplete == "" {
		p.Incomplete = "the probe was cut short: " + context.Cause(ctx).Error()
	}
	return p
}

// probeNamespace starts pmjail's probe role in a new user namespace plus
// flag, and reports whether the kernel allowed it.
func probeNamespace(ctx context.Context, flag uintptr) error {
	cmd := exec.CommandContext(ctx, "/proc/self/exe", ProbeRole)
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | flag,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 65534, Size: 1}},
		Pdeathsig:   syscall.SIGKILL,
	}
	if out, err := cmd.CombinedOutput(); err != nil {
		if len(out) > 0 {
			return fmt.Errorf("%v: %s", err, bytes.TrimSpace(out))
		}
		return err
	}
	return nil
}

// nativeFilter compiles the native seccomp policy the probe jail runs under.
func nativeFilter() ([]byte, error) {
	policy, err := profiles.Seccomp("native")
	if err != nil {
		return nil, err
	}
	prog, err := seccomp.Compile(policy, seccomp.Options{})
	if err != nil {
		return nil, fmt.Errorf("compile seccomp filter: %w", err)
	}
	return prog.MarshalBinary()
}

// insideReport is what the probe role sees from inside the jail.
type insideReport struct {
	RootWrite    string `json:"root_write"`
	HostFile     string `json:"host_file"`
	Hostname     string `json:"hostname"`
	NoNewPrivs   string `json:"no_new_privs"`
	Seccomp      string `json:"seccomp"`
	CapEff       string `json:"cap_eff"`
	CapBnd       string `json:"cap_bnd"`
	RegainRoot   string `json:"regain_root"`
	CoreLimitMax uint64 `json:"core_limit_max"`
	// LandlockWrite is opening the probe's own /proc/self/comm for
	// writing: the root's /proc is read-write, so only Landlock refuses it.
	LandlockWrite string `json:"landlock_write"`
	// LandlockBind is binding a TCP socket, which only Landlock's network
	// rules (ABI 4) refuse.
	LandlockBind string `json:"landlock_bind"`
}

// probeJail runs the probe role in a jail with the given namespaces.
func probeJail(ctx context.Context, namespaces []specs.LinuxNamespaceType, filter []byte) (*insideReport, *jail.Outcome, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, nil, err
	}
	if resolved, err := filepath.EvalSymlinks(exe); err == nil {
		exe = resolved
	}
	launch := &runtimes.Launch{Program: exe, Target: "/pmjail-probe", Args: []string{exe, ProbeRole, "inside"}, Env: []string{}}
	spec, err := rootfs.NewSpec(launch, rootfs.Limits{TmpBytes: 1 << 20, OpenFiles: 64, FileBytes: 1 << 20})
	if err != nil {
		return nil, nil, err
	}
	spec.Linux.Namespaces = nil
	for _, t := range namespaces {
		spec.Linux.Namespaces = append(spec.Linux.Namespaces, specs.LinuxNamespace{Type: t})
	}
	out := jail.Run(ctx, &jail.Job{ID: "probe", Spec: spec.Spec, Seccomp: filter, Landlock: true, Timeout: 10 * time.Second, OutputLimit: 64 << 10})
	if out.Status != jail.StatusOK {
		return nil, out, fmt.Errorf("%s: %s%s", out.Status, out.Message, strings.TrimSpace(" "+string(out.Stderr)))
	}
	var in insideReport
	if err := json.Unmarshal([]byte(out.Stdout), &in); err != nil {
		return nil, out, fmt.Errorf("probe report: %w (%q)", err, out.Stdout)
	}
	return &in, out, nil
}

// judge turns the probe jail's report and observed state into layers.
func judge(set func(string, State, string), in *insideReport, out *jail.Outcome, filtered bool, have map[string]Layer) {
	o := out.Observed
	switch {
	case in.RootWrite == "EROFS" && in.HostFile == "ENOENT":
		set(Rootfs, Applied, "pivot_root into a read-only tmpfs root: writing / gave EROFS, /etc/hostname is absent")
	default:
		set(Rootfs, Missing, fmt.Sprintf("inside the probe jail: write / → %s, /etc/hostname → %s", in.RootWrite, in.HostFile))
	}
	if _, done := have[Seccomp]; !done {
		if filtered && in.Seccomp == "2" {
			set(Seccomp, Applied, "a filter loaded (Seccomp: 2 inside the probe jail)")
		} else {
			set(Seccomp, Missing, "Seccomp: "+in.Seccomp+" inside the probe jail")
		}
	}
	if in.NoNewPrivs == "1" {
		set(NoNewPrivs, Applied, "NoNewPrivs: 1 inside the probe jail")
	} else {
		set(NoNewPrivs, Missing, "NoNewPrivs: "+in.NoNewPrivs)
	}
	if strings.Trim(in.CapEff, "0") == "" && strings.Trim(in.CapBnd, "0") == "" && in.RegainRoot != "ok" && (o == nil || o.NoCapabilities()) {
		set(Capabilities, Applied, "CapEff and CapBnd empty inside the probe jail; setuid(0) failed with "+in.RegainRoot)
	} else {
		set(Capabilities, Missing, fmt.Sprintf("CapEff %s CapBnd %s, setuid(0): %s", in.CapEff, in.CapBnd, in.RegainRoot))
	}
	if in.CoreLimitMax == 0 {
		set(Rlimits, Applied, "RLIMIT_CORE 0 and the open-file and file-size caps set")
	} else {
		set(Rlimits, Missing, fmt.Sprintf("RLIMIT_CORE max %d", in.CoreLimitMax))
	}
	judgeLandlock(set, in, out)
}

// judgeLandlock takes the Landlock layer from what the probe jail's init
// stage enforced and what the probe role saw of it from inside, never
// from the kernel's ABI alone: a ruleset can fail to apply where the
// kernel offers one (too many stacked domains, a refused rule).
func judgeLandlock(set func(string, State, string), in *insideReport, out *jail.Outcome) {
	abi := out.Landlock
	switch {
	case abi == 0 && out.LandlockReason != "":
		set(Landlock, Missing, "the probe jail's ruleset did not apply: "+out.LandlockReason)
	case abi == 0:
		set(Landlock, Missing, "the probe jail's init stage reported no ruleset")
	case in.LandlockWrite != "EACCES":
		set(Landlock, Missing, fmt.Sprintf("ABI %d enforced, yet inside the probe jail opening /proc/self/comm for writing gave %s, want EACCES", abi, in.LandlockWrite))
	case abi >= 4 && in.LandlockBind != "EACCES":
		set(Landlock, Missing, fmt.Sprintf("ABI %d enforced, yet inside the probe jail a TCP bind gave %s, want EACCES", abi, in.LandlockBind))
	case abi >= 4:
		set(Landlock, Applied, fmt.Sprintf("ABI %d: inside the probe jail, opening /proc/self/comm for writing and a TCP bind gave EACCES", abi))
	default:
		set(Landlock, Applied, fmt.Sprintf("ABI %d: inside the probe jail, opening /proc/self/comm for writing gave EACCES", abi))
	}
}

// ProbeChild is the probe role. Without arguments it only proves that a
// process could start (namespace probes); with "inside" it reports what it
// sees from inside a jail. It never returns.
func ProbeChild() {
	if len(os.Args) < 3 || os.Args[2] != "inside" {
		os.Exit(0)
	}
	var r insideReport
	r.RootWrite = errnoName(os.WriteFile("/pmjail-probe-write", nil, 0o600))
	_, err := os.Stat("/etc/hostname")
	r.HostFile = errnoName(err)
	r.Hostname, _ = os.Hostname()
	if status, err := jail.ProcStatus("self"); err == nil {
		r.NoNewPrivs, r.Seccomp = status["NoNewPrivs"], status["Seccomp"]
		r.CapEff, r.CapBnd = status["CapEff"], status["CapBnd"]
	}
	r.RegainRoot = errnoName(unix.Setresuid(0, 0, 0))
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_CORE, &rl) == nil {
		r.CoreLimitMax = rl.Max
	}
	r.LandlockWrite, r.LandlockBind = landlockAttempts()
	_ = json.NewEncoder(os.Stdout).Encode(&r)
	os.Exit(0)
}

// landlockAttempts tries, from inside the probe jail, what only Landlock
// refuses there: opening the process's own /proc/self/comm for writing
// (nothing is written) and binding a TCP socket to an ephemeral port in
// the jail's empty network namespace.
func landlockAttempts() (write, bind string) {
	fd, err := unix.Open("/proc/self/comm", unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err == nil {
		unix.Close(fd)
	}
	write = errnoName(err)
	sock, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return write, errnoName(err)
	}
	defer unix.Close(sock)
	return write, errnoName(unix.Bind(sock, &unix.SockaddrInet4{}))
}

func errnoName(err error) string {
	if err == nil {
		return "ok"
	}
	var errno unix.Errno
	if errors.As(err, &errno) {
		return unix.ErrnoName(errno)
	}
	return err.Error()
}
