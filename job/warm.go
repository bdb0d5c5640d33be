package job

import (
	"context"
	"fmt"
	"strings"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// Limits of a warm run's root: its /tmp holds nothing but what Deno
// writes besides its DENO_DIR (a bind to the host), and a file the size of
// a code cache database must fit under RLIMIT_FSIZE.
const (
	warmTmpBytes  = 64 << 20
	warmFileBytes = 1 << 30
	warmOutput    = 1 << 20
	// warmTimeout bounds a warm run whose context has no deadline.
	warmTimeout = 2 * time.Minute
)

// Warm carries out a runtimes.WarmRun in pmjail's own jail; a supervisor
// sets runtimes.Install.Warmer to it. The root is a job's for the same
// launch (the caches are keyed by in-jail paths), with the cache directory
// bound writable at its target and given to the guest's host id for the
// run (jail.Job.GuestOwned). It runs pmjail's own code only, as the
// Pyodide snapshot build does, so it has the jail's namespaces and rlimits
// but no cgroup, seccomp filter or guest channel, as the bubblewrap run it
// replaces had none.
func Warm(ctx context.Context, run runtimes.WarmRun) error {
	root, err := rootfs.NewSpec(run.Launch, rootfs.Limits{TmpBytes: warmTmpBytes, OpenFiles: 1024, FileBytes: warmFileBytes})
	if err != nil {
		return fmt.Errorf("warm run: %w", err)
	}
	spec := root.Spec
	// After the root's /tmp, on which its mount point is made; a bind
	// without "ro" stays writable when the root goes read-only.
	spec.Mounts = append(spec.Mounts, specs.Mount{Destination: run.Target, Type: "bind", Source: run.Cache, Options: []string{"nosuid", "nodev", "noexec"}})
	timeout := warmTimeout
	if deadline, ok := ctx.Deadline(); ok {
		timeout = time.Until(deadline)
	}
	out := jail.Run(ctx, &jail.Job{
		ID:          NewID(),
		Spec:        spec,
		Files:       run.Launch.Files,
		Timeout:     timeout,
		OutputLimit: warmOutput,
		GuestOwned:  []string{run.Cache},
	})
	if out.Status == jail.StatusOK && out.ExitCode == 0 {
		return nil
	}
	msg := out.Message
	if msg == "" {
		msg = fmt.Sprintf("exit code %d", out.ExitCode)
	}
	if output := strings.TrimSpace(out.Stderr + out.Stdout); output != "" {
		msg += ": " + output
	}
	return fmt.Errorf("%s: %s", out.Status, msg)
}

var _ runtimes.Warmer = Warm
