package job

import (
	"errors"
	"fmt"
	"io/fs"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
	"github.com/pmjail/pmjail/seccomp/bpf"
)

// nativeEnv is a native program's whole environment.
var nativeEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}

// launch describes what to exec for the job.
func (rn *Runner) launch(r *Resolved) (*runtimes.Launch, error) {
	stdin, err := r.Request.StdinBytes()
	if err != nil {
		return nil, err
	}
	if x := r.Request.Exec; x != nil {
		return nativeLaunch(x, stdin, r.Request.Env)
	}
	if rn.Install == nil {
		return nil, fmt.Errorf("%w: no runtime files found", runtimes.ErrNotInstalled)
	}
	var view string
	if len(r.Packages) > 0 {
		if rn.Packages == nil {
			return nil, fmt.Errorf("packages %v allowed, but no package store", r.Packages)
		}
		var err error
		if view, err = rn.Packages.View(r.Packages); err != nil {
			return nil, err
		}
	}
	files, entry := r.Request.Program()
	return rn.Install.Launch(runtimes.Guest{
		Runtime:     r.Runtime,
		Source:      []byte(r.Request.Source),
		Dialect:     runtimes.DialectOf(r.Request.Runtime),
		MemoryBytes: int64(r.Limits.Memory),
		CoarseTime:  r.Profile.CoarseTime,
		Packages:    view,
		TypeCheck:   r.Request.TypeCheck,
		Files:       files,
		Entry:       entry,
		Env:         r.Request.Env,
		Stdin:       stdin,
	})
}

// nativeLaunch binds a native program, found by the operator's PATH, at the
// path it was asked by, with the --ro-bind paths beside it.
func nativeLaunch(x *Exec, stdin []byte, env map[string]string) (*runtimes.Launch, error) {
	path, err := exec.LookPath(x.Program)
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", x.Program, err)
	}
	if path, err = filepath.Abs(path); err != nil {
		return nil, err
	}
	// The file is bound at the path it was asked by: a multi-call binary
	// (busybox) picks its applet from argv[0].
	file, err := filepath.EvalSymlinks(path)
	if err != nil {
		return nil, fmt.Errorf("program %q: %w", x.Program, err)
	}
	l := &runtimes.Launch{
		Program: file,
		Target:  path,
		Args:    append([]string{path}, x.Args...),
		Env:     runtimes.Environ(nativeEnv, env),
	}
	l.SetStdin(stdin)
	// What the jail binds of its own: a bind at one of them, or above
	// one, hides it, and the set-up or the program's exec failed as
	// pmjail's internal_error. (Its libraries are found again, from the
	// cache, when the root is described.)
	own := append([]string{path}, rootfs.Devices()...)
	if libs, err := rootfs.SharedLibraries(file, path); err == nil {
		own = append(own, libs.Files...)
	}
	for _, b := range x.Binds {
		src, dst, ok := strings.Cut(b, ":")
		if !ok {
			dst = src
		}
		if !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
			return nil, invalid("--ro-bind %q: paths must be absolute", b)
		}
		if filepath.Clean(dst) == "/" {
			// Bound over the root, it hid the jail's own mounts: the
			// set-up failed as pmjail's internal_error.
			return nil, invalid("--ro-bind %q: the target is the jail's root: bind at a directory below it (SRC:/DIR)", b)
		}
		for _, o := range own {
			if t := filepath.Clean(dst); o == t || strings.HasPrefix(o, t+"/") {
				return nil, invalid("--ro-bind %q: the target would hide %s, which the jail binds itself (the program, its libraries and the devices): bind elsewhere", b, o)
			}
		}
		if err := refuseUnreadable("--ro-bind", b, src); err != nil {
			return nil, err
		}
		if err := refuseChannels("--ro-bind", b, src); err != nil {
			return nil, err
		}
		l.Binds = append(l.Binds, runtimes.Bind{Source: filepath.Clean(src), Target: filepath.Clean(dst), Exec: true})
	}
	return l, nil
}

// filter is a compiled seccomp program: the bytes the init stage installs
// and the errno the supervisor answers a notified denial with.
type filter struct {
	program []byte
	errno   unix.Errno
}

// filter compiles (once per policy and options) the job's seccomp program.
func (rn *Runner) filter(r *Resolved) (filter, error) {
	src, err := r.Profile.SeccompSource(r.Kind)
	if err != nil {
		return filter{}, err
	}
	opt := filterOptions(r.Profile)
	// Keyed by the policy's own bytes, not the profile's name: two profile
	// files may share a name, and an operator may edit one.
	key := fmt.Sprintf("notify=%t log=%t\x00%s", opt.Notify, opt.Log, src.Data)
	rn.filtersMu.Lock()
	defer rn.filtersMu.Unlock()
	if f, ok := rn.filters[key]; ok {
		return f, nil
	}
	prog, err := rn.compile(src, opt)
	if err != nil {
		return filter{}, fmt.Errorf("%s seccomp policy of profile %s: %w", r.Kind, r.Profile.Name, err)
	}
	b, err := prog.MarshalBinary()
	if err != nil {
		return filter{}, err
	}
	f := filter{program: b, errno: prog.Errno}
	if rn.filters == nil {
		rn.filters = map[string]filter{}
	}
	rn.filters[key] = f
	return f, nil
}

func filterOptions(p *profiles.Profile) seccomp.Options {
	return seccomp.Options{Notify: !p.SeccompLog, Log: p.SeccompLog}
}

// seccompCache is where compiled programs persist between runs: the state
// directory, so nowhere without runtimes found.
func (rn *Runner) seccompCache() *seccomp.Cache {
	if rn.Install == nil {
		return nil
	}
	return &seccomp.Cache{Dir: filepath.Join(rn.Install.StateDir, "seccomp")}
}

// compile decodes and compiles src under opt, unless the cache holds a
// trusted entry for it: a CLI run pays ~1 ms for the compile, every time.
// The cache only ever saves work: whatever is wrong with it, the run
// compiles.
func (rn *Runner) compile(src *profiles.SeccompSource, opt seccomp.Options) (*bpf.Program, error) {
	cache := rn.seccompCache()
	if cache != nil {
		prog, err := cache.Load(src.Data, opt)
		if err == nil {
			return prog, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			rn.logger().Warn("seccomp cache not used; compiling", "err", err)
		}
	}
	policy, err := src.Policy()
	if err != nil {
		return nil, err
	}
	prog, err := seccomp.Compile(policy, opt)
	if err != nil {
		return nil, err
	}
	if cache != nil {
		if err := cache.Store(src.Data, opt, prog); err != nil {
			rn.logger().Warn("seccomp cache not written", "err", err)
		}
	}
	return prog, nil
}

// PrepareFilters compiles the built-in profiles' seccomp programs into the
// state directory's cache and checks that a run would find each there.
// A run compiles and stores what is missing too: an optimisation only.
func PrepareFilters(in *runtimes.Install) (dir string, n int, err error) {
	if in == nil {
		return "", 0, fmt.Errorf("%w: no state directory", runtimes.ErrNotInstalled)
	}
	rn := &Runner{Install: in}
	cache := rn.seccompCache()
	for _, name := range profiles.Names() {
		p, err := profiles.Load(name)
		if err != nil {
			return "", 0, err
		}
		for _, kind := range profiles.ProgramKinds {
			if _, err := rn.filter(&Resolved{Profile: p, Kind: kind}); err != nil {
				return "", 0, err
			}
			src, err := p.SeccompSource(kind)
			if err != nil {
				return "", 0, err
			}
			if _, err := cache.Load(src.Data, filterOptions(p)); err != nil {
				return "", 0, err
			}
			n++
		}
	}
	return cache.Dir, n, nil
}
