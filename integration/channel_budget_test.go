package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestChannelFloodCostsTheGuest: a guest that writes megabyte frames to
// the channel as fast as the host reads them used to cost the supervisor
// a core for the run's whole wall time (decoding a frame costs ~30 times
// what writing it costs), none of it the run's CPU time, so a run with a
// small CPU limit could keep a daemon core busy until its wall limit.
// Past the run's frame budget (ipc.Ceiling.MaxGuestBytes) the host reads a
// frame by its head only, as cheaply as the guest writes it: the guest now
// pays for its flood and meets its own CPU limit.
func TestChannelFloodCostsTheGuest(t *testing.T) {
	// Harmless outside a jail: it writes only to the jail's channel, and
	// stops where there is none.
	src := `let out;
try { out = Deno.openSync("/pmjail/channel/out", { write: true }); } catch { console.log("not jailed"); Deno.exit(0); }
const msg = "x".repeat((4 << 20) - 200);
const body = new TextEncoder().encode(JSON.stringify({ type: "note", method: "log.info", params: { message: msg } }));
const frame = new Uint8Array(4 + body.length);
new DataView(frame.buffer).setUint32(0, body.length);
frame.set(body, 4);
for (;;) { let off = 0; while (off < frame.length) off += out.writeSync(frame.subarray(off)); }
`
	path := filepath.Join(t.TempDir(), "flood.js")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin, argv, env := weakened(t, []string{"run", "--json", "--cap", "log", "--timeout", "15s", "--cpu-time", "500ms", path})
	cmd := exec.CommandContext(ctx, bin, argv...)
	cmd.Env = env
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	var res Result
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatalf("no result: %v\nstdout %.500s\nstderr %.2000s", err, stdout.String(), stderr.String())
	}
	// The supervisor's own CPU time: pmjail's rusage (its reaped children
	// included) less the guest's, which the run's cgroup counted.
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	total := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	host := total - time.Duration(res.Usage.CPUMS)*time.Millisecond
	t.Logf("status %s after %d ms; guest CPU %d ms, supervisor CPU %s, %d frames", res.Status, res.Usage.WallMS, res.Usage.CPUMS, host.Round(time.Millisecond), res.Usage.BrokerCalls)
	if res.Status != "cpu_limit" {
		t.Fatalf("status %s (error %+v), want cpu_limit: the flood must cost the guest its CPU time, not the host's", res.Status, res.Error)
	}
	if host > 8*time.Second {
		t.Errorf("the supervisor spent %s of CPU on a guest limited to 500ms", host)
	}
}
