package initstage

import (
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// Role is argv[1] of a binary that runs as a job's init stage: pmjail's
// small pmjail-init, or pmjail itself. Its main dispatches it to Main
// before anything else.
const Role = "__pmjail_init"

// Fds the init stage receives: the guest channel stays at ChannelFD across
// exec (a placeholder holds the slot until then); the control socket, at
// ControlFD, is closed by it.
const (
	ChannelFD = 3
	ControlFD = 4
)

// Config is everything the init stage needs, sent over the control socket
// (never in argv or the environment). Its first fields are the parts of the
// job's OCI runtime spec the init stage acts on, in the spec's own types
// (ConfigFor picks them); the wire (MarshalBinary) carries only the spec
// fields the init stage reads.
type Config struct {
	// Process is what to exec: args, environment, the guest's ids and
	// rlimits.
	Process *specs.Process
	// Hostname is set in the job's UTS namespace.
	Hostname string
	// Mounts build the root on a fresh tmpfs, in order.
	Mounts []specs.Mount
	// WritableRoot leaves the root writable (the spec's root is not
	// read-only).
	WritableRoot bool
	// Namespaces are those the child was cloned into.
	Namespaces []specs.LinuxNamespaceType
	// Files are written into the root before it is made read-only.
	Files []layout.File
	// Seccomp is the compiled filter (package bpf), installed last; empty
	// for none.
	Seccomp []byte
	// HostMountNS is the supervisor's mount namespace inode: the init stage
	// refuses to touch mounts unless it is provably elsewhere.
	HostMountNS uint64
	// Landlock asks for a Landlock ruleset where the kernel has one.
	Landlock bool
	// Channel asks for the guest channel's FIFOs.
	Channel bool
	// Stdin is a file of the root (one of Files) opened as the runtime's
	// standard input; empty leaves /dev/null there.
	Stdin string
	// AwaitStart holds the runtime's start, once the set-up is reported,
	// until the supervisor sends one byte (StartByte): on cgroup v2 the
	// init stage's own threads are in the job's cgroup, and the supervisor
	// counts them, set-up done, to give the guest its whole tasks limit.
	AwaitStart bool
}

// StartByte is what the supervisor sends an init stage that awaits the
// start (Config.AwaitStart).
const StartByte = 'S'

// Join follows the configuration once the supervisor has the job's cgroup:
// it carries the cgroup v1 task files the init stage joins through
// (SCM_RIGHTS), or none when the supervisor placed it (cgroup v2, or no
// cgroup). The init stage waits for it after mounting the root's file
// systems and before it writes anything of the job's: the supervisor makes
// the cgroup meanwhile, and everything the job's content can grow is
// charged to the job.
type Join struct {
	// TaskFiles is how many task files come with the message.
	TaskFiles int
}

// Premount, sent to an init stage started ahead of its job (jail.Pool)
// before any configuration, names the root's mounts the next job will most
// likely ask for: the init stage mounts them while it waits, its
// namespace's mounts slaves of the host's meanwhile (so that its view of
// the host stays current), private from the configuration on. Its
// configuration's mounts must then equal these, with every bind and copy
// source still the file it opened, or it takes them down and builds the
// root afresh; a premount that fails is undone and leaves the build to
// the configuration, which reports what failed. Nothing of any job is in a
// premounted root: the job's files and copies come after the join, as ever.
type Premount struct {
	Mounts []specs.Mount
	// HostMountNS is the supervisor's mount namespace inode (see Config).
	HostMountNS uint64
}

// ConfigFor returns a Config carrying what the init stage uses of spec: the
// process, hostname, mounts, root read-only flag and namespaces.
func ConfigFor(spec *specs.Spec) Config {
	cfg := Config{Process: spec.Process, Hostname: spec.Hostname, Mounts: spec.Mounts,
		WritableRoot: spec.Root != nil && !spec.Root.Readonly}
	if spec.Linux != nil {
		for _, ns := range spec.Linux.Namespaces {
			cfg.Namespaces = append(cfg.Namespaces, ns.Type)
		}
	}
	return cfg
}

// HasNamespace reports whether the child was cloned into the namespace t.
func (c *Config) HasNamespace(t specs.LinuxNamespaceType) bool {
	return slices.Contains(c.Namespaces, t)
}

// Report is what the init stage sends back: first the layers it applied,
// or the error that stopped it; then, once it has started the runtime, a
// report that it runs (Started, with a pidfd of it) or that it could not
// be executed (Error); last, when the runtime has ended, how (Exited).
type Report struct {
	Error string
	// Stage is the step that failed, and Layer the layer it applies.
	Stage    Stage
	Layer    Layer
	ExitCode int
	// Landlock is the ABI version enforced, 0 for none.
	Landlock int
	// LandlockReason says why Landlock is not enforced.
	LandlockReason string
	// FDs names the descriptors passed with the report, in order.
	FDs []string
	fds []int
	// Premounted says the root was the one mounted ahead (Premount).
	Premounted bool
	// Started says the runtime runs, as the init stage's child; the report
	// carries a pidfd of it (FDRuntime).
	Started bool
	// Exited says the runtime has ended: with ExitCode, or killed by
	// Signal (ExitCode is then 128 + Signal).
	Exited bool
	Signal int
}

// Names of the descriptors a report may carry.
const (
	FDChannelIn  = "channel_in"
	FDChannelOut = "channel_out"
	FDSeccomp    = "seccomp"
	FDRuntime    = "runtime"
)
