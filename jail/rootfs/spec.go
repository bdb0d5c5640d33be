package rootfs

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/runtimes"
)

// Hostname is every job's hostname: nothing of the host's.
const Hostname = "pmjail"

// GuestID is the uid and gid the program runs as inside the job's user
// namespace; the supervisor maps it to a host id of the job's own.
const GuestID = 1000

// Limits are the limits the spec itself carries: the size of the root's
// /tmp and the process's rlimits.
type Limits struct {
	// TmpBytes caps the writable /tmp.
	TmpBytes int64
	// OpenFiles caps RLIMIT_NOFILE.
	OpenFiles uint64
	// FileBytes caps RLIMIT_FSIZE.
	FileBytes uint64
	// CPUSeconds is RLIMIT_CPU's soft limit, a backstop for hosts without a
	// cgroup; 0 for none.
	CPUSeconds uint64
	// Tasks caps RLIMIT_NPROC; every job has its own host uid, so this
	// counts the job's tasks only. 0 for none.
	Tasks uint64
}

// Spec is a job's root and process as NewSpec describes them: the OCI
// spec the init stage sets up, with each library bound by itself, and
// what Link needs to bind them from a tree of links instead.
type Spec struct {
	*specs.Spec
	// libs are the libraries, bound each by itself at Mounts[libsAt:].
	libs   []string
	libsAt int
	// others are the root's other paths, which no tree may cover (see
	// treeTops).
	others []string
	// private: the program loads libraries of its own, which no tree
	// links (see linkable).
	private bool
}

// treeTops returns the top-level directories a tree of links to libs
// would be bound at, or why no tree may stand for them. A tree is used
// only for the system's library directories, and not where another of
// the root's paths (others) lies in one: a tree's directory is bound
// read-only, with no room for that path's mount point or file.
func treeTops(libs, others []string) ([]string, error) {
	if len(libs) == 0 {
		return nil, errors.New("no libraries to link")
	}
	var tops []string
	for _, lib := range libs {
		if top := "/" + strings.SplitN(strings.TrimPrefix(lib, "/"), "/", 2)[0]; !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	if i := slices.IndexFunc(tops, func(top string) bool { return !slices.Contains(libraryTops, top) }); i >= 0 {
		return nil, fmt.Errorf("libraries under %s, which no tree of links is bound at", tops[i])
	}
	inTop := func(p string) bool {
		return slices.ContainsFunc(tops, func(top string) bool { return p == top || strings.HasPrefix(p, top+"/") })
	}
	if i := slices.IndexFunc(others, inTop); i >= 0 {
		return nil, fmt.Errorf("%s lies in a library directory a tree of links would cover", others[i])
	}
	return tops, nil
}

// libraryPathEnv adds dirs to env's LD_LIBRARY_PATH, after any it has.
func libraryPathEnv(env, dirs []string) []string {
	if len(dirs) == 0 {
		return env
	}
	const name = "LD_LIBRARY_PATH="
	path := strings.Join(dirs, ":")
	i := slices.IndexFunc(env, func(kv string) bool { return strings.HasPrefix(kv, name) })
	if i < 0 {
		return append(slices.Clip(env), name+path)
	}
	env = slices.Clone(env)
	if own := strings.TrimPrefix(env[i], name); own != "" {
		path = own + ":" + path
	}
	env[i] = name + path
	return env
}

// libraryTops are the top-level directories a tree of library links may
// be bound at.
var libraryTops = []string{"/lib", "/lib32", "/lib64", "/libx32", "/usr"}

// devices are the only device nodes in a job's /dev.
var devices = []string{"/dev/null", "/dev/zero", "/dev/random", "/dev/urandom"}

// Devices are the device nodes every job's root holds.
func Devices() []string { return slices.Clone(devices) }

// NewSpec describes the contained process and its minimal root for a
// launch: the program and the libraries it loads, the launch's own binds,
// four devices, a fresh /proc and a size-capped /tmp, all else absent. It
// only describes: each library is bound by itself until Link, which
// writes, binds a tree of links to them.
func NewSpec(launch *runtimes.Launch, lim Limits) (*Spec, error) {
	target := launch.Target
	if target == "" {
		target = launch.Program
	}
	libs, err := SharedLibraries(launch.Program, target)
	if err != nil {
		return nil, fmt.Errorf("libraries of %s: %w", launch.Program, err)
	}
	// The job's own /proc and /tmp come first: a bound program or asset that
	// lives under /tmp on the host (a checkout there, say) must be bound on
	// top of the job's /tmp, not hidden beneath it.
	mounts := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "nodev", "noexec", "subset=pid"}},
		{Destination: runtimes.TmpDir, Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "nodev", "noexec", "size=" + strconv.FormatInt(lim.TmpBytes, 10), "mode=1777"}},
	}
	ro := []string{"ro", "nosuid", "nodev"}
	// The root's other paths: a tree of library links is not bound over
	// any of them (see treeTops).
	others := append([]string{target, "/proc", runtimes.TmpDir}, devices...)
	for _, f := range launch.Files {
		others = append(others, f.Path)
	}
	for _, b := range launch.Binds {
		if !filepath.IsAbs(b.Source) || !filepath.IsAbs(b.Target) {
			return nil, fmt.Errorf("bind %s:%s: paths must be absolute", b.Source, b.Target)
		}
		others = append(others, b.Target)
	}
	for _, c := range launch.Copies {
		if !filepath.IsAbs(c.Source) || !filepath.IsAbs(c.Target) {
			return nil, fmt.Errorf("copy %s:%s: paths must be absolute", c.Source, c.Target)
		}
		others = append(others, c.Target)
	}
	root := &Spec{libs: libs.Files, libsAt: len(mounts), others: others, private: libs.private}
	for _, lib := range libs.Files {
		mounts = append(mounts, specs.Mount{Destination: lib, Type: "bind", Source: lib, Options: ro})
	}
	mounts = append(mounts, specs.Mount{Destination: target, Type: "bind", Source: launch.Program, Options: ro})
	for _, b := range launch.Binds {
		opts := append([]string(nil), ro...)
		if !b.Exec {
			opts = append(opts, "noexec")
		}
		mounts = append(mounts, specs.Mount{Destination: b.Target, Type: "bind", Source: b.Source, Options: opts})
	}
	// The devices are the host's own nodes: bound read-only, so that a
	// guest that may write one cannot change the host's inode (touch(1)
	// sets the times of any file its caller may write), while writes to
	// the device itself still go through (a read-only mount stops only
	// changes to the file system).
	for _, d := range devices {
		mounts = append(mounts, specs.Mount{Destination: d, Type: "bind", Source: d, Options: []string{"ro", "nosuid", "noexec"}})
	}
	// A "copy" mount (pmjail's own type) is a per-run writable copy of the
	// read-only host directory Source, made by the init stage on /tmp.
	for _, c := range launch.Copies {
		mounts = append(mounts, specs.Mount{Destination: c.Target, Type: "copy", Source: c.Source, Options: []string{"nosuid", "nodev", "noexec"}})
	}
	rlimits := []specs.POSIXRlimit{
		{Type: "RLIMIT_CORE", Hard: 0, Soft: 0},
		{Type: "RLIMIT_NOFILE", Hard: lim.OpenFiles, Soft: lim.OpenFiles},
		{Type: "RLIMIT_FSIZE", Hard: lim.FileBytes, Soft: lim.FileBytes},
	}
	if lim.CPUSeconds > 0 {
		// SIGXCPU at the limit, SIGKILL a second later.
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_CPU", Soft: lim.CPUSeconds, Hard: lim.CPUSeconds + 1})
	}
	if lim.Tasks > 0 {
		rlimits = append(rlimits, specs.POSIXRlimit{Type: "RLIMIT_NPROC", Soft: lim.Tasks, Hard: lim.Tasks})
	}
	args := append([]string(nil), launch.Args...)
	if len(args) > 0 {
		args[0] = target
	}
	cwd := launch.Dir
	if cwd == "" {
		cwd = "/"
	}
	root.Spec = &specs.Spec{
		Version:  specs.Version,
		Hostname: Hostname,
		Root:     &specs.Root{Path: "tmpfs", Readonly: true},
		Process: &specs.Process{
			Args:            args,
			Env:             libraryPathEnv(launch.Env, libs.ConfDirs),
			Cwd:             cwd,
			User:            specs.User{UID: GuestID, GID: GuestID},
			Rlimits:         rlimits,
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: Namespaces(),
		},
	}
	return root, nil
}

// Namespaces are the namespaces every job's spec starts with (a host
// without one of them leaves it out later): what an init stage started
// before its job is known (jail.Pool.Prestart) is started in.
func Namespaces() []specs.LinuxNamespace {
	return []specs.LinuxNamespace{
		{Type: specs.UserNamespace}, {Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
		{Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
		{Type: specs.CgroupNamespace},
	}
}
