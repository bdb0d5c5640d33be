package job

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/seccomp"
)

// nativeEnv is a native program's whole environment.
var nativeEnv = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"}

// launch describes what to exec for the job.
func (rn *Runner) launch(r *Resolved) (*runtimes.Launch, error) {
	if x := r.Request.Exec; x != nil {
		return nativeLaunch(x)
	}
	if rn.Install == nil {
		return nil, fmt.Errorf("%w: no runtime files found", runtimes.ErrNotInstalled)
	}
	return rn.Install.Launch(runtimes.Job{
		Runtime:     r.Runtime,
		Source:      []byte(r.Request.Source),
		TypeScript:  strings.EqualFold(r.Request.Runtime, "typescript") || strings.EqualFold(r.Request.Runtime, "ts"),
		MemoryBytes: int64(r.Limits.Memory),
		CoarseTime:  r.Profile.CoarseTime,
	})
}

// nativeLaunch binds a native program, found by the operator's PATH, at the
// path it was asked by, with the --ro-bind paths beside it.
func nativeLaunch(x *Exec) (*runtimes.Launch, error) {
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
		Env:     nativeEnv,
	}
	for _, b := range x.Binds {
		src, dst, ok := strings.Cut(b, ":")
		if !ok {
			dst = src
		}
		if !filepath.IsAbs(src) || !filepath.IsAbs(dst) {
			return nil, invalid("--ro-bind %q: paths must be absolute", b)
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

// filter compiles (once per profile and kind) the job's seccomp program.
func (rn *Runner) filter(r *Resolved) (filter, error) {
	key := r.Profile.Name + "/" + r.Kind + fmt.Sprint(r.Profile.SeccompLog)
	rn.filtersMu.Lock()
	defer rn.filtersMu.Unlock()
	if f, ok := rn.filters[key]; ok {
		return f, nil
	}
	policy, err := r.Profile.SeccompPolicy(r.Kind)
	if err != nil {
		return filter{}, err
	}
	prog, err := seccomp.Compile(policy, seccomp.Options{Notify: !r.Profile.SeccompLog, Log: r.Profile.SeccompLog})
	if err != nil {
		return filter{}, fmt.Errorf("compile %s seccomp policy of profile %s: %w", r.Kind, r.Profile.Name, err)
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
