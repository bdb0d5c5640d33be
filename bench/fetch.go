package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"
)

// The JavaScript programs make fewCalls or fetchCalls more: the
// difference between the two is per-call cost alone, without what a
// program's first call pays once (Deno loads its fetch module when a
// program first touches Request or Response, ~25 ms on a loaded machine).
const (
	fewCalls   = 10
	fetchCalls = 100
	// timedCalls is how many of each fetch-timed.js makes, taking turns.
	timedCalls = 200
)

// fetch: what the platform's fetch (and Python's pyfetch) costs per call
// over the broker call it makes, side by side with host.request.send
// against the same loopback origin.
func (b *Bench) fetch(ctx context.Context) error {
	b.Report.Section("fetch through the broker: per call, against host.request.send")
	origin, stop, err := loopbackOrigin()
	if err != nil {
		return err
	}
	defer stop()
	url := origin + "/"
	sendJS := func(n int) string {
		return fmt.Sprintf("for (let i = 0; i < %d; i++) {\n  const r = await host.request.send({ url: %q });\n  if (!r.ok || r.value.body !== \"ok\") throw new Error(JSON.stringify(r));\n}\nconsole.log(\"hello\");\n", n, url)
	}
	fetchJS := func(n int) string {
		return fmt.Sprintf("for (let i = 0; i < %d; i++) {\n  const r = await fetch(%q);\n  if (!r.ok || await r.text() !== \"ok\") throw new Error(String(r.status));\n}\nconsole.log(\"hello\");\n", n, url)
	}
	files := map[string]string{
		"send-few.js":  sendJS(fewCalls),
		"send.js":      sendJS(fewCalls + fetchCalls),
		"fetch-few.js": fetchJS(fewCalls),
		"fetch.js":     fetchJS(fewCalls + fetchCalls),
		"fetch-timed.js": fmt.Sprintf(`const url = %q;
await host.request.send({ url });
await (await fetch(url)).text();
const send = [], fetched = [];
for (let i = 0; i < %d; i++) {
  let t = performance.now();
  const r = await host.request.send({ url });
  if (!r.ok || r.value.body !== "ok") throw new Error(JSON.stringify(r));
  send.push(performance.now() - t);
  t = performance.now();
  const f = await fetch(url);
  if (!f.ok || await f.text() !== "ok") throw new Error(String(f.status));
  fetched.push(performance.now() - t);
}
const mean = (a) => a.reduce((x, y) => x + y, 0) / a.length;
console.log("send", Math.round(mean(send) * 1e6), "fetch", Math.round(mean(fetched) * 1e6));
`, url, timedCalls),
		"send.py":  fmt.Sprintf("import pmjail\nfor _ in range(%d):\n    r = await pmjail.request.send_async({\"url\": %q})\n    assert r[\"ok\"] and r[\"value\"][\"body\"] == \"ok\", r\nprint(\"hello\")\n", fetchCalls, url),
		"fetch.py": fmt.Sprintf("from pyodide.http import pyfetch\nfor _ in range(%d):\n    r = await pyfetch(%q)\n    assert r.ok and await r.text() == \"ok\", r.status\nprint(\"hello\")\n", fetchCalls, url),
	}
	for name, text := range files {
		if err := os.WriteFile(b.work(name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	run := func(file string) []string { return []string{b.Pmjail, "run", "--cap", "request=" + origin, file} }

	b.Report.Para("JavaScript: sequential GETs of a small body from an HTTP server the bench runs on the loopback (%s), with `host.request.send` and with `fetch` (each response's text read), %d and %d of them, so that the difference is %d calls' cost without what the first call pays once; the hello has the same capability:", origin, fewCalls, fewCalls+fetchCalls, fetchCalls)
	const hello, sendFew, sendMany, fetchFew, fetchMany = 0, 1, 2, 3, 4
	js, err := b.compare(ctx, []Variant{
		hello:     {Name: "hello.js", Argv: run("hello.js"), Want: "hello"},
		sendFew:   {Name: fmt.Sprintf("%d × host.request.send", fewCalls), Argv: run("send-few.js"), Want: "hello"},
		sendMany:  {Name: fmt.Sprintf("%d × host.request.send", fewCalls+fetchCalls), Argv: run("send.js"), Want: "hello"},
		fetchFew:  {Name: fmt.Sprintf("%d × fetch", fewCalls), Argv: run("fetch-few.js"), Want: "hello"},
		fetchMany: {Name: fmt.Sprintf("%d × fetch", fewCalls+fetchCalls), Argv: run("fetch.js"), Want: "hello"},
	}, b.Reps, 2, hello)
	if err != nil {
		return err
	}
	if _, err := b.ensureSnapshot(ctx); err != nil {
		return err
	}
	b.Report.Para("Python: %d GETs with `pmjail.request.send_async` and with `pyodide.http.pyfetch`, against a hello:", fetchCalls)
	py, err := b.compare(ctx, []Variant{
		{Name: "hello.py", Argv: run("hello.py"), Want: "hello"},
		{Name: fmt.Sprintf("%d × pmjail.request.send_async", fetchCalls), Argv: run("send.py"), Want: "hello"},
		{Name: fmt.Sprintf("%d × pyfetch", fetchCalls), Argv: run("fetch.py"), Want: "hello"},
	}, b.PyReps, 1, 0)
	if err != nil {
		return err
	}

	inSend, inFetch, err := b.fetchInside(ctx, run("fetch-timed.js"))
	if err != nil {
		return err
	}

	jsSend := (js[sendMany].Median - js[sendFew].Median) / fetchCalls
	jsFetch := (js[fetchMany].Median - js[fetchFew].Median) / fetchCalls
	// What fetch's first calls cost beyond their per-call share.
	once := (js[fetchFew].Median - js[sendFew].Median) - fewCalls*(jsFetch-jsSend)
	pySend := (py[1].Median - py[0].Median) / fetchCalls
	pyFetch := (py[2].Median - py[0].Median) / fetchCalls
	b.Report.Table([]string{"per call", "time", "what"}, [][]string{
		{"JS `host.request.send`, loopback", us(jsSend), fmt.Sprintf("(%d calls − %d calls) / %d, through the CLI", fewCalls+fetchCalls, fewCalls, fetchCalls)},
		{"JS `fetch`, loopback", us(jsFetch), "the same, with fetch and the response's text"},
		{"JS `fetch` over `host.request.send`", us(jsFetch - jsSend), "the difference of the two rows above"},
		{"JS `host.request.send`, inside the guest", us(inSend), fmt.Sprintf("the guest's own clock around each call, the mean of %d calls taking turns with fetch after one of each (`fetch-timed.js`), so warming up counts; the median of %d runs", timedCalls, b.Reps)},
		{"JS `fetch`, inside the guest", us(inFetch), "the same run's fetches, each response's text read"},
		{"JS `fetch` over `host.request.send`, inside the guest", us(inFetch - inSend), "the difference of the two rows above: side by side in one run"},
		{"JS `fetch`, once a run", signedMS(once), fmt.Sprintf("%d fetches − %d sends, less %d calls' difference: Deno loading its fetch module", fewCalls, fewCalls, fewCalls)},
		{"Python `pmjail.request.send_async`, loopback", us(pySend), fmt.Sprintf("(%d calls − hello) / %d, through the CLI", fetchCalls, fetchCalls)},
		{"Python `pyfetch`, loopback", us(pyFetch), "the same, with pyfetch and the response's text"},
		{"Python `pyfetch` over `send_async`", us(pyFetch - pySend), "the difference of the two rows above"},
	})
	// The target reads the side-by-side rows: calls taking turns in one
	// run share the machine's load, which whole runs on a busy machine
	// do not (the CLI rows are shown beside them).
	b.Report.Target("fetch adds ≤ 0.5 ms per call over host.request.send (loopback, side by side in one run)",
		fmt.Sprintf("%s (%s vs %s; through the CLI %s)", us(inFetch-inSend), us(inFetch), us(inSend), us(jsFetch-jsSend)), inFetch-inSend <= 500*time.Microsecond)
	return nil
}

// fetchInside runs fetch-timed.js b.Reps times and returns the medians of
// its per-call means, host.request.send's and fetch's.
func (b *Bench) fetchInside(ctx context.Context, argv []string) (send, fetch time.Duration, err error) {
	var sends, fetches []time.Duration
	for range b.Reps {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = b.Work
		out, err := cmd.Output()
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
		var s, f int64
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "send %d fetch %d", &s, &f); err != nil {
			return 0, 0, fmt.Errorf("%s: output %q: %w", strings.Join(argv, " "), tail(string(out)), err)
		}
		sends, fetches = append(sends, time.Duration(s)), append(fetches, time.Duration(f))
	}
	return Summarize(sends).Median, Summarize(fetches).Median, nil
}
