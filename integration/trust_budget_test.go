package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
)

// controlReplyServer answers every request with n bytes of \x01, the byte
// whose JSON escape (\u0001) is six times its size.
func controlReplyServer(t testing.TB, n int) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(strings.Repeat("\x01", n))
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write(body)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}

// vmHWM is a process's peak resident set, from /proc/PID/status.
func vmHWM(t testing.TB, pid int) int64 {
	t.Helper()
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "VmHWM:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			t.Fatalf("VmHWM %q: %v", rest, err)
		}
		return kb << 10
	}
	t.Fatalf("no VmHWM in /proc/%d/status", pid)
	return 0
}

// budgetAttack is a guest that makes the daemon hold as much as it can for
// it: sixteen concurrent broker calls whose replies are 2 MiB of control
// characters, then 16 MiB of them on stdout and on stderr. It only talks
// to the test's own loopback server and writes its own output.
const budgetAttack = `export default async (input, ctx) => {
  const calls = Array.from({ length: 16 }, () => ctx.host.request.send({ url: input.url }));
  const codes = (await Promise.all(calls)).map((r) => (r.ok ? "ok" : r.error.code));
  const chunk = new Uint8Array(1 << 20).fill(input.byte ?? 1);
  for (let i = 0; i < 16; i++) {
    for (const w of [Deno.stdout, Deno.stderr]) {
      let off = 0;
      while (off < chunk.length) off += w.writeSync(chunk.subarray(off));
    }
  }
  return codes;
};`

// budgetHeadroom is how far above its idle peak the daemon may go while it
// serves one budgetAttack run (issue #33 item 4).
const budgetHeadroom = 64 << 20

// A guest must not make the daemon hold many times what its limits say:
// replies are sized before they are built and share one budget per run,
// output is held once, and the result is streamed, not escaped into one
// buffer. Each way of answering gets a fresh daemon, since VmHWM is the
// process's peak over its whole life.
func TestTrust_DaemonMemoryBudget(t *testing.T) {
	origin := controlReplyServer(t, 2<<20)
	for _, c := range []struct {
		name     string
		streamed bool
		b        byte
	}{
		{"result", false, 1}, {"streamed", true, 1},
		// Output that is not UTF-8 crosses in base64, also streamed.
		{"streamed-binary", true, 0xff},
	} {
		t.Run(c.name, func(t *testing.T) {
			idle, peak := budgetAttackPeakOf(t, origin, c.streamed, c.b)
			t.Logf("daemon VmHWM: idle %d MiB, after the attack %d MiB (+%d MiB)", idle>>20, peak>>20, (peak-idle)>>20)
			if peak-idle > budgetHeadroom {
				t.Errorf("the daemon's peak grew by %d MiB serving one run, over the %d MiB allowed", (peak-idle)>>20, budgetHeadroom>>20)
			}
		})
	}
}

// budgetAttackPeak starts a daemon, runs budgetAttack on it once and
// returns the daemon's VmHWM before and after.
func budgetAttackPeak(tb testing.TB, origin string, streamed bool) (idle, peak int64) {
	tb.Helper()
	return budgetAttackPeakOf(tb, origin, streamed, 1)
}

// budgetAttackPeakOf is budgetAttackPeak with the output made of the
// byte b.
func budgetAttackPeakOf(tb testing.TB, origin string, streamed bool, b byte) (idle, peak int64) {
	tb.Helper()
	d := startDaemon(tb, daemonDir(tb), `{"version": 1, "max_concurrency": 1, "max_queue": 2, "socket": {"mode": "0660"},
		"ceiling": {"limits": {"memory": "1G", "output": "16M", "timeout": "2m", "cpu_time": "60s"},
		"capabilities": {"log": true, "request": {"origins": ["*"], "private_origins": [`+jsString(origin)+`]}}}}`)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	// One ordinary run first, so that "idle" includes what any run costs
	// once (the runtime's files, the first job's goroutines).
	if res, err := d.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("warm")`}); err != nil || res.Status != jail.StatusOK {
		tb.Fatalf("warm-up run: %+v %v", res, err)
	}
	idle = vmHWM(tb, d.pid())

	req := &api.Job{
		Runtime:      "deno",
		Source:       budgetAttack,
		Input:        json.RawMessage(`{"url":` + strconv.Quote(origin+"/") + `,"byte":` + strconv.Itoa(int(b)) + `}`),
		Capabilities: api.Capabilities{Request: &api.RequestCapability{URLs: []string{origin}}},
		Limits:       api.Limits{Output: 16 << 20, Memory: 1 << 30},
	}
	var (
		res *jail.Result
		err error
	)
	if streamed {
		res, err = d.c.Stream(ctx, req, func(api.Event) {})
	} else {
		res, err = d.c.Run(ctx, req)
	}
	if err != nil {
		tb.Fatal(err)
	}
	peak = vmHWM(tb, d.pid())
	if res.Status != jail.StatusOK {
		tb.Fatalf("status %s error %+v", res.Status, res.Error)
	}
	var codes []string
	if err := json.Unmarshal(res.Value, &codes); err != nil || len(codes) != 16 {
		tb.Fatalf("value %.200s: %v", res.Value, err)
	}
	for _, c := range codes {
		if c != ipc.CodeTooLarge {
			tb.Errorf("a 2 MiB reply of control characters answered %q, want too_large (12 MiB escaped, over the frame cap)", c)
		}
	}
	want := strings.Repeat(string([]byte{b}), 16<<20)
	if res.Stdout != want || res.Stderr != want || res.Truncated.Stdout || res.Truncated.Stderr {
		tb.Errorf("stdout %d bytes, stderr %d, truncated %+v: want 16 MiB of %#x each", len(res.Stdout), len(res.Stderr), res.Truncated, b)
	}
	return idle, peak
}

// BenchmarkDaemonMemoryBudget reports how far one budgetAttack run takes
// the daemon's peak above idle (issue #33 item 4: at most 64 MiB).
func BenchmarkDaemonMemoryBudget(b *testing.B) {
	origin := controlReplyServer(b, 2<<20)
	for _, streamed := range []bool{false, true} {
		name := map[bool]string{false: "result", true: "streamed"}[streamed]
		b.Run(name, func(b *testing.B) {
			var grew int64
			for b.Loop() {
				idle, peak := budgetAttackPeak(b, origin, streamed)
				grew = max(grew, peak-idle)
			}
			b.ReportMetric(float64(grew)/(1<<20), "MiB-above-idle")
		})
	}
}

// One call too big for a frame is refused as that call (too_large), and
// the channel stays in step: the next call works and the run ends ok.
func TestTrust_OversizedCallSkipped(t *testing.T) {
	t.Run("through the bootstrap", func(t *testing.T) {
		src := `const big = await host.log.info("x".repeat(16 << 20));
const after = await host.log.info("after");
console.log(JSON.stringify({ big: big.ok ? "ok" : big.error.code, after: after.ok ? "ok" : after.error.code }));`
		res := runScript(t, "biglog.js", src, "--cap", "log", "--timeout", "60s", "--memory", "512M")
		if res.Status != "ok" || res.ExitCode != 0 {
			t.Fatalf("status %s exit %d error %+v, want ok 0", res.Status, res.ExitCode, res.Error)
		}
		if got := strings.TrimSpace(res.Stdout); got != `{"big":"too_large","after":"ok"}` {
			t.Errorf("calls answered %s, want the 16 MiB one too_large and the next ok", got)
		}
		if len(res.Logs) != 1 || res.Logs[0].Message != "after" {
			t.Errorf("logs %+v, want only the small one", res.Logs)
		}
		if res.Usage.BrokerCalls != 2 {
			t.Errorf("broker_calls %d, want 2 (the refused one counts)", res.Usage.BrokerCalls)
		}
	})
	t.Run("raw frame", func(t *testing.T) {
		// The guest's own code writes the frame, 16 MiB announced and sent,
		// with a call id the bootstrap never uses: the host answers it (the
		// bootstrap drops that reply) and reads on from the next frame.
		src := rawChannel + `const head = '{"type":"call","id":4000000000,"method":"log.info","params":{"message":"';
const size = 16 << 20;
const body = new TextEncoder().encode(head + "x".repeat(size - head.length - 3) + '"}}');
raw(header(body.length)); raw(body);
const after = await host.log.info("after");
console.log(after.ok ? "ok" : after.error.code);`
		res := runScript(t, "rawbig.js", src, "--cap", "log", "--timeout", "60s", "--memory", "512M")
		if res.Status != "ok" || strings.TrimSpace(res.Stdout) != "ok" {
			t.Fatalf("status %s stdout %q error %+v, want ok: the call after a skipped frame works", res.Status, res.Stdout, res.Error)
		}
		if len(res.Logs) != 1 || res.Usage.BrokerCalls != 2 {
			t.Errorf("logs %+v broker_calls %d, want the small log and 2 calls", res.Logs, res.Usage.BrokerCalls)
		}
	})
	// A frame that cannot be skipped is still a broken channel.
	for _, c := range []struct{ name, body string }{
		{"not a call", `const b = new TextEncoder().encode('{"type":"done","value":"' + "x".repeat(5 << 20) + '"}'); raw(header(b.length)); raw(b);`},
		{"truncated", `const b = new TextEncoder().encode('{"type":"call","id":9,"method":"log.info","params":"xx'); raw(header(16 << 20)); raw(b);`},
		{"garbage header", `raw(new Uint8Array([0x7f, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5, 6, 7, 8]));`},
	} {
		t.Run(c.name, func(t *testing.T) {
			res := runScript(t, "unskippable.js", rawChannel+c.body+"\nawait new Promise(() => setInterval(() => {}, 1000));", "--cap", "log", "--timeout", "30s")
			if res.Status != "protocol_error" || res.ExitCode != 125 {
				t.Fatalf("status %s exit %d error %+v, want protocol_error 125", res.Status, res.ExitCode, res.Error)
			}
		})
	}
}
