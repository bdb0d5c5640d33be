package integration

import (
	"context"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// TestDaemonExitFrameForged: a guest writes exit frames of its own on its
// channel (it may open it: the bootstrap's channel is its file too). An
// exit frame ends the run at once with the code it says, which the guest
// could have had from Deno.exit, and nothing more: a second frame is not
// read, a code that is no exit code is a protocol error, and a limit the
// guest went past is still the run's end and its report.
func TestDaemonExitFrameForged(t *testing.T) {
	d := startDaemon(t, daemonDir(t), warmConfig)
	const forge = `const forge = (obj) => { const b = new TextEncoder().encode(JSON.stringify(obj)); const f = new Uint8Array(4 + b.length); new DataView(f.buffer).setUint32(0, b.length); f.set(b, 4); Deno.openSync("/pmjail/channel/out", { write: true }).writeSync(f) };
const linger = () => new Promise((r) => setTimeout(r, 20000));
`
	for _, tc := range []struct {
		name, source string
		limits       api.Limits
		status       jail.Status
		code         int
		stdout       string
	}{
		{"twice", `console.log("a"); forge({ type: "exit", code: 3 }); forge({ type: "exit", code: 0 }); await linger()`, api.Limits{}, jail.StatusError, 3, "a\n"},
		{"code 256", `forge({ type: "exit", code: 256 }); await linger()`, api.Limits{}, jail.StatusProtocolError, 0, ""},
		{"past the output limit", `console.log("x".repeat(100000)); forge({ type: "exit", code: 0 }); await linger()`, api.Limits{Output: 50000}, jail.StatusOutputLimit, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			res, err := d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: forge + tc.source, Limits: tc.limits})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 15*time.Second {
				t.Fatalf("the run took %s: it waited for the guest", took)
			}
			if res.Status != tc.status || (tc.stdout != "" && (res.Stdout != tc.stdout || res.ExitCode != tc.code || res.Signal != "")) {
				t.Fatalf("status %s, exit %d, signal %q, limits %v, stdout %.40q (error %+v); want %s, exit %d, stdout %q",
					res.Status, res.ExitCode, res.Signal, res.LimitsHit, res.Stdout, res.Error, tc.status, tc.code, tc.stdout)
			}
			if tc.status == jail.StatusOutputLimit && (len(res.LimitsHit) != 1 || res.LimitsHit[0] != "output" || !res.Truncated.Stdout) {
				t.Fatalf("limits %v, truncated %+v: want output", res.LimitsHit, res.Truncated)
			}
		})
	}
}
