package runtimes

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// channelScript writes script (%q in it stands for the real channel.js)
// into dir and returns the command that runs it under Deno, with read and
// write access, dir and args its arguments.
func channelScript(ctx context.Context, t testing.TB, in *Install, script, dir string, args ...string) *exec.Cmd {
	t.Helper()
	channelJS, err := filepath.Abs("guest/channel.js")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "script.mjs")
	src := strings.Replace(script, "%q", `"file://`+channelJS+`"`, 1)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.CommandContext(ctx, in.DenoPath, append([]string{"run", "--no-config", "--allow-read", "--allow-write", path, dir}, args...)...)
	cmd.Env = append(denoEnv(), "DENO_DIR="+filepath.Join(dir, "deno"))
	return cmd
}

// hostEndsJS opens the host's ends of the channel's FIFOs in dir, first,
// as the init stage holds them, and defines frame(obj), one length-prefixed
// frame: the head of every script that plays the host.
const hostEndsJS = `
const hostIn = Deno.openSync(dir + "/in", { read: true, write: true });
const hostOut = Deno.openSync(dir + "/out", { read: true, write: true });
const frame = (obj) => {
  const body = new TextEncoder().encode(JSON.stringify(obj));
  const f = new Uint8Array(4 + body.length);
  new DataView(f.buffer).setUint32(0, body.length);
  f.set(body, 4);
  return f;
};
`

// hostFIFOs makes the channel's two FIFOs in dir and opens the host's
// ends of them, first, as the init stage holds them.
func hostFIFOs(t testing.TB, dir string) map[string]*os.File {
	t.Helper()
	ends := map[string]*os.File{}
	for _, p := range []string{"in", "out"} {
		if err := unix.Mkfifo(filepath.Join(dir, p), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(filepath.Join(dir, p), os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		ends[p] = f
	}
	return ends
}

// channelHostScript plays the host's end of the guest channel against the
// real channel.js: it answers the start frame, then (for each case) breaks
// the stream the way a corrupted host would and prints what the guest's
// next call resolved to.
const channelHostScript = `
import { Channel } from %q;
const [dir, mode] = Deno.args;
` + hostEndsJS + `
// The start frame is waiting when the guest starts, as in a run: the
// guest reads it synchronously, on this same thread.
hostIn.writeSync(frame({ type: "start", input: null }));
const ch = new Channel(dir + "/in", dir + "/out");
await ch.started;
// A length prefix far over the limit, or a whole frame that is not JSON.
const broken = mode.startsWith("garbage") ? new Uint8Array([0, 0, 0, 2, 0x7b, 0x78]) : new Uint8Array([0xff, 0xff, 0xff, 0x00]);
// The host's end plays on this same thread, so the call awaited as the
// stream breaks is one the guest waits for asynchronously (request.send);
// a log call would wait in a synchronous read for the host to answer.
let reply;
if (mode.endsWith("-prompt")) {
  // The break is there first: the log call's synchronous read meets it.
  hostIn.writeSync(broken);
  reply = ch.call("log.info", { message: "x" });
} else {
  reply = ch.call("request.send", { url: "http://x.invalid/" });
  hostIn.writeSync(broken);
}
console.log(JSON.stringify(await reply));
// A call after the break fails at once too.
console.log(JSON.stringify(await ch.call("log.info", { message: "y" })));
hostOut.close();
hostIn.close();
`

// TestChannelBrokenHostStream: a frame length over the limit, or a frame
// that is not JSON, fails the guest's pending and later calls at once; it
// used to leave them waiting for bytes that never come (until the wall
// limit).
func TestChannelBrokenHostStream(t *testing.T) {
	in := testInstall(t, t.TempDir())
	for _, mode := range []string{"oversize", "garbage", "oversize-prompt", "garbage-prompt"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			for _, p := range []string{"in", "out"} {
				if err := unix.Mkfifo(filepath.Join(dir, p), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := channelScript(ctx, t, in, channelHostScript, dir, mode)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the guest's call still waits on a broken stream after 20 s: %s", out)
			}
			if err != nil {
				t.Fatalf("host script: %v\n%s", err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) != 2 {
				t.Fatalf("want two call results, got %q", out)
			}
			for _, l := range lines {
				if !strings.Contains(l, `"ok":false`) || !strings.Contains(l, `"code":"internal"`) || !strings.Contains(l, "channel broken") {
					t.Errorf("call on a broken stream resolved to %s, want ok:false, code internal, \"channel broken\"", l)
				}
			}
			if strings.HasPrefix(mode, "oversize") && !strings.Contains(lines[0], "over the") {
				t.Errorf("reason %s does not say the frame is over the limit", lines[0])
			}
		})
	}
}

// channelStartScript constructs the guest's Channel over a host stream
// held in a file (what the host wrote before the guest started; the end of
// the file is the host closing its end) and prints what the start resolved
// to.
const channelStartScript = `
import { Channel } from %q;
const [dir] = Deno.args;
try {
  const start = await new Channel(dir + "/in", dir + "/out").started;
  console.log(JSON.stringify({ ok: true, start }));
} catch (err) {
  console.log(JSON.stringify({ ok: false, error: err.message }));
}
`

// TestChannelStartFrame: the guest reads up to its start frame whatever
// it holds (non-ASCII input, a frame over the read size) and wherever it
// comes from, and a stream that breaks or ends before it rejects the start
// with the reason instead of waiting.
func TestChannelStartFrame(t *testing.T) {
	in := testInstall(t, t.TempDir())
	frame := func(body string) []byte {
		f := binary.BigEndian.AppendUint32(nil, uint32(len(body)))
		return append(f, body...)
	}
	big := strings.Repeat("x", 200<<10)
	start := func(input string) string { return `{"type":"start","input":` + input + `}` }
	for _, tc := range []struct {
		name   string
		stream []byte
		want   string // in the printed result
	}{
		{"ascii", frame(start(`{"name":"operator"}`)), `"ok":true,"start":{"type":"start","input":{"name":"operator"}}`},
		{"utf-8", frame(start(`"héllo ✓"`)), `"input":"héllo ✓"`},
		{"over a read", frame(start(`"` + big + `"`)), `"input":"` + big + `"`},
		{"after a reply", append(frame(`{"type":"reply","id":7,"ok":true}`), frame(start(`1`))...), `"input":1`},
		{"oversize length", []byte{0xff, 0xff, 0xff, 0x00}, `"ok":false,"error":"channel broken: a frame of 4294967040 bytes`},
		{"not JSON", frame(`{x`), `"ok":false,"error":"channel broken:`},
		{"end before start", frame(start(`1`))[:10], `"ok":false,"error":"channel closed"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "in"), tc.stream, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "out"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			cmd := channelScript(ctx, t, in, channelStartScript, dir)
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("the guest still waits for its start after 20 s: %.300s", out)
			}
			if err != nil {
				t.Fatalf("guest script: %v\n%.300s", err, out)
			}
			if !strings.Contains(string(out), tc.want) {
				t.Errorf("start resolved to %.300s, want it to contain %.300s", out, tc.want)
			}
			// Whatever came after, the guest said it was ready first.
			if wrote, err := os.ReadFile(filepath.Join(dir, "out")); err != nil || !bytes.HasPrefix(wrote, frame(`{"type":"ready"}`)) {
				t.Errorf("the guest wrote %q (%v), want its ready frame first", wrote, err)
			}
		})
	}
}

// TestChannelStartFrameComesLate: through real FIFOs, a guest whose start
// frame is not there yet waits for it (in its synchronous read) and goes
// on when it comes.
func TestChannelStartFrameComesLate(t *testing.T) {
	in := testInstall(t, t.TempDir())
	dir := t.TempDir()
	ends := hostFIFOs(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := channelScript(ctx, t, in, channelStartScript, dir)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitReading(t, cmd.Process.Pid, filepath.Join(dir, "in"))
	body := `{"type":"start","input":"late"}`
	if _, err := ends["in"].Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(body))), body...)); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("guest script: %v\n%.300s", err, out.String())
	}
	if !strings.Contains(out.String(), `"ok":true,"start":{"type":"start","input":"late"}`) {
		t.Errorf("start resolved to %.300s", out.String())
	}
}

// waitReading waits until a thread of pid sits in read(2) on its
// descriptor for path: the guest is waiting for what the test will write.
func waitReading(t testing.TB, pid int, path string) {
	t.Helper()
	tasks := fmt.Sprintf("/proc/%d/task", pid)
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		threads, _ := os.ReadDir(tasks)
		for _, th := range threads {
			sc, err := os.ReadFile(filepath.Join(tasks, th.Name(), "syscall"))
			fields := strings.Fields(string(sc))
			if err != nil || len(fields) < 2 || fields[0] != strconv.Itoa(unix.SYS_READ) {
				continue
			}
			fd, err := strconv.ParseUint(strings.TrimPrefix(fields[1], "0x"), 16, 32)
			if err != nil {
				continue
			}
			if target, _ := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", pid, fd)); target == path {
				return
			}
		}
	}
	t.Fatalf("pid %d never read from %s", pid, path)
}
