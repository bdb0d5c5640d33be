package jail

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// TestRunEndsOnTheExitFrame: a guest that says on its channel how it
// exits (the exit frame), then lingers, is killed at once: the run ends
// long before its wall-clock limit, with the code said and no signal,
// and with every byte it wrote before. Without the frame the same guest
// runs into its limit.
func TestRunEndsOnTheExitFrame(t *testing.T) {
	testenv.RequireRoot(t)
	// The shell blocks reading its channel after the start frame, which
	// holds no newline, until the host closes it; then opening the FIFO
	// again waits for a writer that never comes. It never exits on its
	// own (a shell exiting 1 at the EOF raced the host's kill).
	const linger = `while :; do read x < /pmjail/channel/in; done`
	for _, tc := range []struct {
		name   string
		frame  bool
		code   int
		status Status
	}{
		{"exit 3", true, 3, StatusError},
		{"exit 0", true, 0, StatusOK},
		{"no frame", false, 0, StatusTimeout},
	} {
		t.Run(tc.name, func(t *testing.T) {
			script := `echo before; `
			if tc.frame {
				body := `{"type":"exit","code":` + string(rune('0'+tc.code)) + `}`
				script += `printf '\000\000\000\0` + octal(len(body)) + body + `' > /pmjail/channel/out; `
			}
			script += linger
			launch := &runtimes.Launch{Program: "/bin/sh", Args: []string{"sh", "-c", script}, Env: []string{"PATH=/nonexistent"}, Channel: true}
			spec, err := rootfs.NewSpec(launch, testLimits)
			if err != nil {
				t.Fatal(err)
			}
			exited := make(chan int, 1)
			job := &Job{ID: "exit", Spec: spec.Spec, Files: launch.Files, Timeout: 3 * time.Second, OutputLimit: 1 << 20, Exited: exited,
				Channel: func(ctx context.Context, conn net.Conn) error {
					out := ipc.Serve(ctx, conn, ipc.SessionConfig{OnExit: func(code int) { exited <- code }})
					return out.ProtocolError
				},
			}
			start := time.Now()
			out := Run(context.Background(), job)
			took := time.Since(start)
			if out.Status != tc.status || out.Stdout != "before\n" {
				t.Fatalf("status %s (%s), exit %d, signal %q, stdout %q, stderr %q; want %s, stdout \"before\\n\"", out.Status, out.Message, out.ExitCode, out.Signal, out.Stdout, out.Stderr, tc.status)
			}
			if tc.frame && (out.ExitCode != tc.code || out.Signal != "" || took > 2*time.Second) {
				t.Fatalf("exit %d, signal %q after %s; want exit %d, no signal, well before the 3s limit", out.ExitCode, out.Signal, took, tc.code)
			}
		})
	}
}

// octal is n's last octal digits after "\0" in a printf format: n < 64.
func octal(n int) string {
	return string(rune('0'+n/8)) + string(rune('0'+n%8))
}
