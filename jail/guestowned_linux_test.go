package jail

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/internal/testenv"
)

// TestRunGuestOwned binds a directory of the supervisor's (0700) writable
// into the root: the guest can write into it only when the job names it
// GuestOwned, and then what it writes is its leased host id's.
func TestRunGuestOwned(t *testing.T) {
	testenv.RequireRoot(t)
	for _, owned := range []bool{false, true} {
		parent, err := os.MkdirTemp("", "jail-guest-owned-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(parent)
		// The init stage opens the bind's source as an unprivileged id.
		if err := os.Chmod(parent, 0o711); err != nil {
			t.Fatal(err)
		}
		dir := filepath.Join(parent, "out")
		if err := os.Mkdir(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		job := shellJob(t, `echo written > /out/f`, testLimits)
		job.Spec.Mounts = append(job.Spec.Mounts, specs.Mount{Destination: "/out", Type: "bind", Source: dir, Options: []string{"nosuid", "nodev", "noexec"}})
		if owned {
			job.GuestOwned = []string{dir}
		}
		out := Run(context.Background(), job)
		data, readErr := os.ReadFile(filepath.Join(dir, "f"))
		if !owned {
			if out.Status != StatusError || readErr == nil {
				t.Errorf("not guest-owned: status %s, stderr %q, file %q: want the write refused", out.Status, out.Stderr, data)
			}
			continue
		}
		if out.Status != StatusOK || string(data) != "written\n" {
			t.Fatalf("guest-owned: status %s %s, stderr %q, file %q %v", out.Status, out.Message, out.Stderr, data, readErr)
		}
		for _, p := range []string{dir, filepath.Join(dir, "f")} {
			st, err := os.Stat(p)
			if err != nil {
				t.Fatal(err)
			}
			if uid := st.Sys().(*syscall.Stat_t).Uid; uid < idBase || uid%2 != 1 {
				t.Errorf("%s is uid %d's, want a leased guest id", p, uid)
			}
		}
	}
}
