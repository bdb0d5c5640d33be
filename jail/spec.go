package jail

import (
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

// RootLimits are the limits the jail itself applies through the spec, and
// where it may keep what roots share.
type RootLimits struct {
	// LibraryLinks is a state directory where NewSpec keeps hard links to
	// the program's libraries (see linkLibraries), to bind them as whole
	// directories. Empty, or where a tree cannot be used (another file
	// system, a path others could change): each library is bound by itself.
	LibraryLinks string
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

// libraryMounts binds the libraries: the top-level directories of a tree
// of links to them where linkDir allows one, else each by itself. A tree
// is used only for the system's library directories, and not where
// another of the root's paths (others) lies in one: a tree's directory is
// bound read-only, with no room for that path's mount point or file.
func libraryMounts(libs []string, linkDir string, others []string, opts []string) []specs.Mount {
	var tops []string
	for _, lib := range libs {
		if top := "/" + strings.SplitN(strings.TrimPrefix(lib, "/"), "/", 2)[0]; !slices.Contains(tops, top) {
			tops = append(tops, top)
		}
	}
	inTop := func(p string) bool {
		return slices.ContainsFunc(tops, func(top string) bool { return p == top || strings.HasPrefix(p, top+"/") })
	}
	var mounts []specs.Mount
	if linkDir != "" && len(libs) > 0 && !slices.ContainsFunc(tops, func(top string) bool { return !slices.Contains(libraryTops, top) }) &&
		!slices.ContainsFunc(others, inTop) {
		if tree, err := linkLibraries(linkDir, libs, hostSearch.dirsFor(libs...)); err == nil {
			for _, top := range tops {
				mounts = append(mounts, specs.Mount{Destination: top, Type: "bind", Source: filepath.Join(tree, top), Options: opts})
			}
			return mounts
		}
	}
	for _, lib := range libs {
		mounts = append(mounts, specs.Mount{Destination: lib, Type: "bind", Source: lib, Options: opts})
	}
	return mounts
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

// NewSpec describes the contained process and its minimal root for a
// launch: the program and the libraries it loads, the launch's own binds,
// four devices, a fresh /proc and a size-capped /tmp, all else absent.
func NewSpec(launch *runtimes.Launch, lim RootLimits) (*specs.Spec, error) {
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
	// The root's other paths, checked before a tree of library links is
	// made: the tree is not bound over any of them (see libraryMounts).
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
	linkDir := lim.LibraryLinks
	if libs.private {
		// A tree links only files of the library directories (linkable):
		// a program with its own, private, libraries binds each file.
		linkDir = ""
	}
	mounts = append(mounts, libraryMounts(libs.Files, linkDir, others, ro)...)
	mounts = append(mounts, specs.Mount{Destination: target, Type: "bind", Source: launch.Program, Options: ro})
	for _, b := range launch.Binds {
		opts := append([]string(nil), ro...)
		if !b.Exec {
			opts = append(opts, "noexec")
		}
		mounts = append(mounts, specs.Mount{Destination: b.Target, Type: "bind", Source: b.Source, Options: opts})
	}
	for _, d := range devices {
		mounts = append(mounts, specs.Mount{Destination: d, Type: "bind", Source: d, Options: []string{"nosuid", "noexec"}})
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
	return &specs.Spec{
		Version:  specs.Version,
		Hostname: Hostname,
		Root:     &specs.Root{Path: "tmpfs", Readonly: true},
		Process: &specs.Process{
			Args:            args,
			Env:             libraryPathEnv(launch.Env, libs.ConfDirs),
			Cwd:             "/",
			User:            specs.User{UID: guestID, GID: guestID},
			Rlimits:         rlimits,
			NoNewPrivileges: true,
			Capabilities:    &specs.LinuxCapabilities{},
		},
		Mounts: mounts,
		Linux: &specs.Linux{
			Namespaces: []specs.LinuxNamespace{
				{Type: specs.UserNamespace}, {Type: specs.PIDNamespace}, {Type: specs.MountNamespace},
				{Type: specs.NetworkNamespace}, {Type: specs.IPCNamespace}, {Type: specs.UTSNamespace},
				{Type: specs.CgroupNamespace},
			},
		},
	}, nil
}
