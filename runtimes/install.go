package runtimes

import (
	"errors"
	"fmt"
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
