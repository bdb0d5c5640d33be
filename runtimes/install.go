package runtimes

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// EnvRuntimeDir names the setting that points pmjail at its runtime files:
// a node_modules directory holding the pinned deno and pyodide packages.
// Without it pmjail looks beside its own binary (see Locate); it never
// searches PATH.
const EnvRuntimeDir = "PMJAIL_RUNTIME_DIR"

// EnvStateDir names the setting for where pmjail keeps what it derives from
// the runtimes (the Pyodide snapshot, the warm code cache); by default a
// .cache/pmjail directory beside the node_modules directory.
const EnvStateDir = "PMJAIL_STATE_DIR"

// SystemRuntimeDir is the host-wide place of the runtime files, Locate's
// last resort.
const SystemRuntimeDir = "/usr/local/lib/pmjail/node_modules"

// ErrNotInstalled is returned when the runtime files cannot be found.
var ErrNotInstalled = errors.New("runtime not installed")

// ErrUnreachable marks a runtime or state directory that a jail's ids,
// unprivileged on the host, cannot reach: a directory on its path others
// may not search.
var ErrUnreachable = errors.New("is not searchable by others")

// CheckDirs makes the state directory if it is missing, each directory
// it makes 0755 whatever the umask, and refuses an install whose runtime
// files or state the jails could not use. A jail binds Deno and Pyodide
// from ModulesDir and the snapshot and caches from StateDir, opened by its
// own unprivileged ids: a parent others cannot search (a state directory
// under a 0700 one, as mktemp -d makes, or made under umask 077) failed
// every Python run, and every run once the Deno caches were built there,
// as pmjail's own internal_error.
func (in *Install) CheckDirs() error {
	if in.StateDir != "" {
		if err := mkdirShared(in.StateDir); err != nil {
			return fmt.Errorf("state directory %s: %w", in.StateDir, err)
		}
	}
	for _, d := range []struct{ what, dir, env string }{
		{"runtime directory", in.ModulesDir, EnvRuntimeDir},
		{"state directory", in.StateDir, EnvStateDir},
	} {
		if d.dir == "" {
			continue
		}
		abs, err := filepath.Abs(d.dir)
		if err != nil {
			return fmt.Errorf("%s %s: %w", d.what, d.dir, err)
		}
		for p := abs; ; p = filepath.Dir(p) {
			if st, err := os.Stat(p); err == nil && st.IsDir() && st.Mode().Perm()&0o001 == 0 {
				return fmt.Errorf("%s %s (%s): %s %w (mode %04o): a jail's ids are unprivileged on the host and reach the files pmjail binds from it through every parent; chmod o+x %s, or set %s to another directory",
					d.what, abs, "$"+d.env, p, ErrUnreachable, st.Mode().Perm(), p, d.env)
			}
			if p == filepath.Dir(p) {
				break
			}
		}
	}
	return nil
}

// mkdirShared makes dir and its missing parents 0755, as MkdirAll does
// under umask 022: under 077 they were 0700, and the jails' ids could not
// reach what pmjail then built in them. A directory that exists is left
// as it is, for CheckDirs to judge.
func mkdirShared(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if _, err := os.Stat(abs); err == nil {
		return nil
	}
	if parent := filepath.Dir(abs); parent != abs {
		if err := mkdirShared(parent); err != nil {
			return err
		}
	}
	if err := os.Mkdir(abs, 0o755); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return nil
		}
		return err
	}
	return os.Chmod(abs, 0o755)
}

// Install is the set of runtime files found on this host.
type Install struct {
	// ModulesDir is the node_modules directory the files came from.
	ModulesDir string
	// DenoPath is the Deno executable.
	DenoPath string
	// PyodideDir holds pyodide.mjs, pyodide.asm.wasm and the stdlib.
	PyodideDir string
	// StateDir holds what pmjail derives from the runtimes (the Pyodide
	// memory snapshot); it is writable by the supervisor only.
	StateDir string
	// Warmer runs the warm runs that build the Deno caches (EnsureDenoCache,
	// EnsureGuestCache) in the jail; without one no cache is built, and
	// runs start without one. Locate leaves it unset: see job.Warm.
	Warmer Warmer
}

// Locate finds the runtime files: $PMJAIL_RUNTIME_DIR if set, else
// <binary>/../node_modules (a source checkout's bin/pmjail),
// <binary>/../lib/pmjail/node_modules (an installed layout) or
// SystemRuntimeDir (where docs/daemon.md installs them, and so where a
// `go install`ed pmjail, in $GOBIN, finds them). It never looks in the
// working directory: the supervisor runs what it finds there.
func Locate() (*Install, error) {
	var candidates []string
	if dir := os.Getenv(EnvRuntimeDir); dir != "" {
		candidates = []string{dir}
	} else {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("locate runtimes: %w", err)
		}
		if resolved, err := filepath.EvalSymlinks(exe); err == nil {
			exe = resolved
		}
		base := filepath.Dir(filepath.Dir(exe))
		candidates = []string{
			filepath.Join(base, "node_modules"),
			filepath.Join(base, "lib", "pmjail", "node_modules"),
			SystemRuntimeDir,
		}
	}
	for _, dir := range candidates {
		deno := filepath.Join(dir, "@deno", "linux-x64-glibc", "deno")
		if st, err := os.Stat(deno); err == nil && st.Mode().IsRegular() {
			abs, err := filepath.Abs(dir)
			if err != nil {
				return nil, fmt.Errorf("locate runtimes: %w", err)
			}
			state := os.Getenv(EnvStateDir)
			if state == "" {
				state = filepath.Join(filepath.Dir(abs), ".cache", "pmjail")
			}
			return &Install{
				ModulesDir: abs,
				DenoPath:   filepath.Join(abs, "@deno", "linux-x64-glibc", "deno"),
				PyodideDir: filepath.Join(abs, "pyodide"),
				StateDir:   state,
			}, nil
		}
	}
	return nil, fmt.Errorf("%w: no deno binary under %v (run `make setup`, or set %s to a node_modules directory)",
		ErrNotInstalled, candidates, EnvRuntimeDir)
}
