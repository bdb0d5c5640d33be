package runtimes

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/ipc"
)

// fifoEnds is the host's end of a channel over two FIFOs, as a net.Conn
// for ipc.Serve (the jail's own is in package jail).
type fifoEnds struct {
	net.Conn // only for the methods Serve does not call
	r, w     *os.File
}

func (c *fifoEnds) Read(p []byte) (int, error)         { return c.r.Read(p) }
func (c *fifoEnds) Write(p []byte) (int, error)        { return c.w.Write(p) }
func (c *fifoEnds) SetReadDeadline(t time.Time) error  { return c.r.SetReadDeadline(t) }
func (c *fifoEnds) SetWriteDeadline(t time.Time) error { return c.w.SetWriteDeadline(t) }

// channelMixedScript mixes the guest's two ways of waiting for a reply:
// log calls wait in a synchronous read, unless a request.send is
// outstanding, whose reply comes only once a timer of the guest's has
// fired and told the origin to answer. Every call must resolve, in the
// order the host answers them, and the timer must fire although the
// guest keeps calling.
const channelMixedScript = `
import { Channel, makeHost } from %q;
const [dir, origin] = Deno.args;
const ch = new Channel(dir + "/in", dir + "/out");
await ch.started;
const host = makeHost(ch, null);
const seen = [];
for (let i = 0; i < 20; i++) seen.push((await host.log.info("sync " + i)).ok);
// callSync answers a prompt method in place, and declines what it cannot.
for (let i = 0; i < 20; i++) seen.push(ch.callSync("log.info", { message: "callSync " + i })?.ok);
seen.push(ch.callSync("request.send", { url: origin + "/" }) === null);
const slow = host.request.send({ url: origin + "/slow" });
// With the request's asynchronous read outstanding, callSync declines a
// call that needs its reply (a meta makes it one) ...
seen.push(ch.callSync("log.info", { message: "declined", meta: 1 }) === null);
// ... and answers one the host's credit covers, as a note.
seen.push(ch.callSync("log.info", { message: "noted" })?.ok === true);
let fired = false;
setTimeout(async () => {
  fired = true;
  seen.push((await host.request.send({ url: origin + "/release" })).ok);
}, 20);
// While the request waits, log calls that need their reply go the
// asynchronous way; they still resolve at once, and the timer still
// fires among them. (Notes resolve in place, as a resolved promise does:
// a loop of them would not let the timer run.)
let during = 0;
while (!fired) {
  seen.push((await host.log.info("during " + during++, {})).ok);
}
const r = await slow;
seen.push(r.ok && r.value.body === "released");
const burst = await Promise.all(Array.from({ length: 50 }, (_, i) => host.log.info("burst " + i)));
for (const b of burst) seen.push(b.ok);
for (let i = 0; i < 20; i++) seen.push((await host.log.info("after " + i)).ok);
console.log(JSON.stringify({ all: seen.every((x) => x === true), n: seen.length, during }));
await ch.finish({ type: "done", value: null });
`

// TestChannelMixedCalls: through real FIFOs and the real broker, the
// guest's synchronous and asynchronous waits for replies mix without a
// call lost or a timer starved, and callSync answers only what it can.
func TestChannelMixedCalls(t *testing.T) {
	in := testInstall(t, t.TempDir())
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/slow":
			select {
			case <-release:
				io.WriteString(w, "released")
			case <-r.Context().Done():
			}
		case "/release":
			close(release)
		}
	}))
	defer srv.Close()

	dir := t.TempDir()
	ends := hostFIFOs(t, dir)
	caps := ipc.Capabilities{Log: true, Request: &ipc.RequestCapability{URLs: []string{srv.URL}}}
	if err := caps.Validate(); err != nil {
		t.Fatal(err)
	}
	ceil := ipc.PermissiveCeiling()
	ceil.AllowPrivateAddresses = true
	ceil.MaxLogs = 1 << 20
	ceil.MaxCalls = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	served := make(chan ipc.Outcome, 1)
	go func() {
		served <- ipc.Serve(ctx, &fifoEnds{r: ends["out"], w: ends["in"]}, ipc.SessionConfig{Capabilities: caps, Ceiling: ceil})
	}()
	cmd := channelScript(ctx, t, in, channelMixedScript, dir, srv.URL)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatalf("the guest still waits after 30 s: %.500s", out)
	}
	if err != nil {
		t.Fatalf("guest script: %v\n%.500s", err, out)
	}
	if !strings.Contains(string(out), `"all":true`) || strings.Contains(string(out), `"during":0`) {
		t.Errorf("guest saw %s, want every call ok and log calls made while the request waited", out)
	}
	o := <-served
	if !o.Done || o.ProtocolError != nil || o.HostError != nil {
		t.Errorf("session outcome: done %v, protocol error %v, host error %v", o.Done, o.ProtocolError, o.HostError)
	}
	noted := false
	for _, l := range o.Logs {
		if l.Message == "declined" {
			t.Errorf("a call callSync declined reached the host")
		}
		noted = noted || l.Message == "noted"
	}
	if !noted {
		t.Errorf("the log callSync sent as a note did not reach the host")
	}
}
