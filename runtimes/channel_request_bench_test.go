package runtimes

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/ipc"
)

// channelRequestScript times, round by round, the ways a call's reply can
// reach the guest: a request.send to a loopback origin, one the host
// refuses before anything leaves it (an undeclared origin), a method the
// host refuses in its read loop (both waited for in an asynchronous read),
// and a log call with a meta (a round trip waited for in a synchronous
// read). It prints each kind's median over the rounds, ns a call.
const channelRequestScript = `
import { Channel } from %q;
const [dir, n, url] = [Deno.args[0], Number(Deno.args[1]), Deno.args[2]];
const ch = new Channel(dir + "/in", dir + "/out");
await ch.started;
const kinds = {
  send: () => ch.call("request.send", { url }),
  refused: () => ch.call("request.send", { url: "http://127.0.0.2:1/" }),
  unknown: () => ch.call("no.such", null),
  log: () => ch.call("log.info", { message: "x", meta: {} }),
};
const per = {};
for (const k in kinds) per[k] = [];
const rounds = 9;
for (let r = 0; r < rounds; r++) {
  for (const [k, f] of Object.entries(kinds)) {
    for (let i = 0; i < 20; i++) await f();
    const t = performance.now();
    for (let i = 0; i < n; i++) await f();
    per[k].push(Math.round((performance.now() - t) * 1e6 / n));
  }
}
const med = (a) => a.sort((x, y) => x - y)[a.length >> 1];
console.log(JSON.stringify(Object.fromEntries(Object.entries(per).map(([k, a]) => [k, med(a)]))));
await ch.finish({ type: "done", value: null });
`

// BenchmarkChannelRequest: request.send through the real channel.js under
// Deno and ipc.Serve over two FIFOs, beside the calls that isolate its
// parts (see channelRequestScript) and a direct GET of the same origin
// from Go with keep-alive; the medians of interleaved rounds, ns a call.
func BenchmarkChannelRequest(b *testing.B) {
	in := testInstall(b, b.TempDir())
	dir := b.TempDir()
	ends := hostFIFOs(b, dir)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") }))
	defer srv.Close()
	ceil := ipc.PermissiveCeiling()
	ceil.MaxCalls = 1 << 30
	ceil.MaxLogs = 1 << 30
	ceil.MaxLogBytes = 1 << 40
	ceil.MaxGuestBytes = 1 << 50 // every frame counts at least 512 bytes
	ceil.AllowPrivateAddresses = true
	caps := ipc.Capabilities{Log: true, Request: &ipc.RequestCapability{URLs: []string{srv.URL}}}
	if err := caps.Validate(); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	served := make(chan ipc.Outcome, 1)
	go func() {
		served <- ipc.Serve(ctx, &fifoEnds{r: ends["out"], w: ends["in"]}, ipc.SessionConfig{Capabilities: caps, Ceiling: ceil})
	}()
	n := max(b.N, 200)
	direct := directGetsNS(b, srv.URL+"/", n)
	cmd := channelScript(ctx, b, in, channelRequestScript, dir, fmt.Sprint(n), srv.URL+"/")
	b.ResetTimer()
	out, err := cmd.CombinedOutput()
	b.StopTimer()
	if err != nil {
		b.Fatalf("guest script: %v\n%.500s", err, out)
	}
	var got map[string]float64
	if err := json.Unmarshal([]byte(strings.TrimSpace(string(out))), &got); err != nil {
		b.Fatalf("guest printed %q: %v", out, err)
	}
	if o := <-served; !o.Done || o.ProtocolError != nil {
		b.Fatalf("session: done %v, protocol error %v", o.Done, o.ProtocolError)
	}
	got["direct"] = (direct + directGetsNS(b, srv.URL+"/", n)) / 2
	for k, v := range got {
		b.ReportMetric(v, k+"-ns/call")
	}
	b.ReportMetric(got["send"], "ns/op")
}

// directGetsNS is the median over rounds of n sequential GETs of url, ns a
// call, from a client with keep-alive on: the request.send's floor.
func directGetsNS(b *testing.B, url string, n int) float64 {
	tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	get := func() {
		resp, err := client.Get(url)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	var per []float64
	for range 9 {
		for range 20 {
			get()
		}
		t := time.Now()
		for range n {
			get()
		}
		per = append(per, float64(time.Since(t).Nanoseconds())/float64(n))
	}
	slices.Sort(per)
	return per[len(per)/2]
}
