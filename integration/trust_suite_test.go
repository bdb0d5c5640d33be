package integration

import (
	"bytes"
	"context"
	"errors"
	"os/exec"
	"runtime"
	"testing"
	"time"

	llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// landlockMaxLayers is how many Landlock domains the kernel stacks on one
// thread (LANDLOCK_MAX_NUM_LAYERS): one more is refused with E2BIG.
const landlockMaxLayers = 16

// TestTrust_PostureLandlockFromProbeJail starts `pmjail posture` from a
// thread that already holds as many Landlock domains as the kernel stacks,
// so the probe jail's own ruleset cannot apply: the host's posture must
// not then call Landlock applied because the kernel offers an ABI. On a
// kernel with network rules (ABI 4) the outer domains only refuse TCP
// binds, and the probe jail itself still runs; below that they restrict
// the file system, which refuses the probe jail its mounts too.
func TestTrust_PostureLandlockFromProbeJail(t *testing.T) {
	abi := kernelLandlockABI()
	testenv.Need(t, abi > 0, "Landlock")
	attr := llsys.RulesetAttr{HandledAccessFS: llsys.AccessFSMakeBlock}
	if abi >= 4 {
		attr = llsys.RulesetAttr{HandledAccessNet: llsys.AccessNetBindTCP}
	}
	out, err := onLandlockedThread(t, &attr, landlockMaxLayers, pmjail, "posture", "--json")
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		t.Fatalf("pmjail posture: %v", err)
	}
	p := decodePosture(t, out)
	for _, l := range p.Layers {
		if l.Name == "landlock" {
			if l.State == "applied" {
				t.Fatalf("the probe jail could not stack its ruleset, yet the host's posture says Landlock is applied: %q", l.Detail)
			}
			t.Logf("landlock %s: %s", l.State, l.Detail)
			return
		}
	}
	t.Fatalf("no landlock layer in the posture:\n%s", out)
}

// kernelLandlockABI is the Landlock ABI the kernel offers, 0 for none.
func kernelLandlockABI() int {
	abi, err := llsys.LandlockGetABIVersion()
	if err != nil {
		return 0
	}
	return abi
}

// skipWithoutLandlock skips a test whose run applied no Landlock: rightly
// where the kernel offers none (the posture says the layer is missing,
// and why), and through testenv.SkipOrFail where it offers an ABI, so
// that under CI=true a run that did not apply it fails.
func skipWithoutLandlock(t *testing.T, state string) {
	t.Helper()
	abi := kernelLandlockABI()
	if abi == 0 {
		t.Skipf("the kernel offers no Landlock ABI; the run's landlock layer: %q", state)
	}
	testenv.SkipOrFail(t, "the kernel offers Landlock ABI %d, but the run did not apply it (landlock layer %q)", abi, state)
}

// onLandlockedThread runs the program with args from a locked thread that
// first enforces layers Landlock domains handling attr's rights (with no
// rule: those rights are refused), and returns its stdout. Only that
// thread gets the domains, and it is thrown away after: the test process
// itself stays unrestricted.
func onLandlockedThread(t *testing.T, attr *llsys.RulesetAttr, layers int, program string, args ...string) ([]byte, error) {
	t.Helper()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Never unlocked: the goroutine's end ends the thread and its domains.
		runtime.LockOSThread()
		for range layers {
			fd, err := llsys.LandlockCreateRuleset(attr, 0)
			if err != nil {
				done <- result{err: err}
				return
			}
			err = llsys.LandlockRestrictSelf(fd, 0)
			unix.Close(fd)
			if err != nil {
				done <- result{err: err}
				return
			}
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		c := exec.CommandContext(ctx, program, args...)
		var stdout, stderr bytes.Buffer
		c.Stdout, c.Stderr = &stdout, &stderr
		err := c.Run()
		if stderr.Len() > 0 {
			t.Logf("stderr: %s", stderr.Bytes())
		}
		done <- result{stdout.Bytes(), err}
	}()
	r := <-done
	return r.out, r.err
}
