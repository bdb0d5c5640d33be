package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Broker calls per guest program: enough that the difference against a
// hello is well over a hello's spread.
const (
	logCalls     = 900
	requestCalls = 100
	// bigSize is the "1 MB" of input or source: under the CLI's caps of
	// 1 MiB, which count the whole file.
	bigSize = 1_000_000
)

// broker: what a broker call costs a guest, measured through the CLI as
// the difference against a hello in the same jail, next to the host's own
// dispatch and a bare pipe round trip measured in the same run.
func (b *Bench) broker(ctx context.Context) error {
	b.Report.Section("Broker calls: per call, against the host's dispatch and a bare pipe")
	if err := b.writeBrokerFiles(); err != nil {
		return err
	}
	pipe, err := pipePingPong(100_000)
	if err != nil {
		return err
	}
	dispatch, err := b.dispatchPerCall(ctx)
	if err != nil {
		return err
	}

	b.Report.Para("Deno: %d × `host.log.info`, then 1 MB of input (`--input @input.json`, a %d-byte JSON file) and 1 MB of source (a %d-byte script), each against the same hello with the same flags; and bare Deno doing the same work outside pmjail (a fresh DENO_DIR each run, as every jailed run has): the hello, the same 1 MB script, and a hello that reads and parses the same input file (`input.js`), as the guest parses the start frame that carries it:", logCalls, bigSize, bigSize)
	const hello, logs, input, source, bareHello, bareInput, bareSource = 0, 1, 2, 3, 4, 5, 6
	run := func(args ...string) []string { return append([]string{b.Pmjail, "run", "--cap", "log"}, args...) }
	bare := func(args ...string) []string { return append([]string{b.Deno, "run"}, args...) }
	js, err := b.compare(ctx, []Variant{
		hello:      {Name: "hello.js", Argv: run("hello.js"), Want: "hello"},
		logs:       {Name: fmt.Sprintf("%d × host.log.info", logCalls), Argv: run("log.js"), Want: "hello"},
		input:      {Name: "hello.js, 1 MB of input", Argv: run("--input", "@input.json", "hello.js"), Want: "hello"},
		source:     {Name: "1 MB of source", Argv: run("big.js"), Want: "hello"},
		bareHello:  {Name: "bare deno hello.js", Argv: bare("hello.js"), FreshDenoDir: true, Dir: b.Work, Want: "hello"},
		bareInput:  {Name: "bare deno, 1 MB of input read from its file", Argv: bare("--allow-read=input.json", "input.js"), FreshDenoDir: true, Dir: b.Work, Want: "hello"},
		bareSource: {Name: "bare deno, 1 MB of source", Argv: bare("big.js"), FreshDenoDir: true, Dir: b.Work, Want: "hello"},
	}, b.Reps, 2, hello)
	if err != nil {
		return err
	}
	jsCall := (js[logs].Median - js[hello].Median) / logCalls

	if _, err := b.ensureSnapshot(ctx); err != nil {
		return err
	}
	b.Report.Para("Python: %d × `pmjail.log.info` against a Python hello:", logCalls)
	// The calls add ~10 ms to a ~0.5 s run whose spread is several times
	// that: the difference of two medians of PyReps rounds is mostly
	// noise, of three times as many much less.
	pyReps := 3 * b.PyReps
	py, err := b.compare(ctx, []Variant{
		{Name: "hello.py", Argv: run("hello.py"), Want: "hello"},
		{Name: fmt.Sprintf("%d × pmjail.log.info", logCalls), Argv: run("log.py"), Want: "hello"},
	}, pyReps, 1, 0)
	if err != nil {
		return err
	}
	pyCall := (py[1].Median - py[0].Median) / logCalls

	origin, stop, err := loopbackOrigin()
	if err != nil {
		return err
	}
	defer stop()
	b.Report.Para("`host.request.send`: %d sequential GETs of a small body from an HTTP server the bench runs on the loopback (%s), against the same hello with the same capability, and against the same %d GETs sent directly by the bench with Go's client (keep-alive on, a new client per round: one dial per round, as pmjail keeps a run's connections alive within the run). The origin is a process of its own, so both cross a process boundary:", requestCalls, origin, requestCalls)
	reqJS := fmt.Sprintf("for (let i = 0; i < %d; i++) {\n  const r = await host.request.send({ url: %q });\n  if (!r.ok || r.value.body !== \"ok\") throw new Error(JSON.stringify(r));\n}\nconsole.log(\"hello\");\n", requestCalls, origin+"/")
	if err := os.WriteFile(b.work("request.js"), []byte(reqJS), 0o644); err != nil {
		return err
	}
	// request-timed.js: the guest's own clock around the same calls after
	// a few of warm-up (the connection dialled, V8's code warm), as
	// log-timed.js does for log calls.
	reqTimed := fmt.Sprintf("const url = %q;\nfor (let i = 0; i < 10; i++) await host.request.send({ url });\nconst t = performance.now();\nfor (let i = 0; i < %d; i++) {\n  const r = await host.request.send({ url });\n  if (!r.ok || r.value.body !== \"ok\") throw new Error(JSON.stringify(r));\n}\nconsole.log(\"ns/call\", Math.round((performance.now() - t) * 1e6 / %d));\n", origin+"/", requestCalls, requestCalls)
	if err := os.WriteFile(b.work("request-timed.js"), []byte(reqTimed), 0o644); err != nil {
		return err
	}
	reqRun := func(file string) []string { return []string{b.Pmjail, "run", "--cap", "request=" + origin, file} }
	req, err := b.compare(ctx, []Variant{
		{Name: "hello.js", Argv: reqRun("hello.js"), Want: "hello"},
		{Name: fmt.Sprintf("%d × host.request.send", requestCalls), Argv: reqRun("request.js"), Want: "hello"},
		{Name: fmt.Sprintf("%d GETs from the host (Go, keep-alive)", requestCalls), Call: directGets(origin+"/", requestCalls),
			Shown: fmt.Sprintf("in the bench: a new http.Client, then %d sequential GETs of %s/, each body read and closed", requestCalls, origin)},
	}, b.Reps, 2, 0)
	if err != nil {
		return err
	}
	reqCall := (req[1].Median - req[0].Median) / requestCalls
	directCall := req[2].Median / requestCalls
	reqInside, err := b.timedInside(ctx, reqRun("request-timed.js"), b.Reps)
	if err != nil {
		return err
	}

	jsInside, err := b.timedInside(ctx, run("log-timed.js"), b.Reps)
	if err != nil {
		return err
	}
	pyInside, err := b.timedInside(ctx, run("log-timed.py"), pyReps)
	if err != nil {
		return err
	}

	inputAdded := js[input].Median - js[hello].Median
	sourceAdded := js[source].Median - js[hello].Median
	// What pmjail adds to carry the megabyte: its added time less what
	// bare Deno's own work on the same megabyte adds.
	inputBare := js[bareInput].Median - js[bareHello].Median
	sourceBare := js[bareSource].Median - js[bareHello].Median
	inputOver, sourceOver := inputAdded-inputBare, sourceAdded-sourceBare
	// Each row also as a multiple of the two floors measured in this run:
	// on a loaded machine every figure moves, these ratios much less.
	row := func(name string, d time.Duration, what string) []string {
		return []string{name, us(d), fmt.Sprintf("%.2f×", Ratio(d, pipe)), fmt.Sprintf("%.2f×", Ratio(d, dispatch)), what}
	}
	b.Report.Table([]string{"per call", "time", "× pipe", "× dispatch", "what"}, [][]string{
		row("bare pipe round trip", pipe, "two threads, one byte each way over a pipe pair (blocking read/write), in the bench process"),
		row("host dispatch (`BenchmarkBrokerDispatch`)", dispatch, "ipc.Serve answering log.info to an in-process Go guest over a socket pair"),
		row("JS `host.log.info`", jsCall, fmt.Sprintf("(%d calls − hello) / %d, through the CLI", logCalls, logCalls)),
		row("Python `pmjail.log.info`", pyCall, fmt.Sprintf("(%d calls − hello) / %d, through the CLI", logCalls, logCalls)),
		row("JS `host.log.info`, inside the guest", jsInside, fmt.Sprintf("the guest's own clock around its %d calls (`log-timed.js`), median of %d runs", logCalls, b.Reps)),
		row("Python `pmjail.log.info`, inside the guest", pyInside, fmt.Sprintf("the same in Python (`log-timed.py`), median of %d runs", pyReps)),
		row("JS `host.request.send`, loopback", reqCall, fmt.Sprintf("(%d calls − hello) / %d, through the CLI", requestCalls, requestCalls)),
		row("JS `host.request.send`, loopback, inside the guest", reqInside, fmt.Sprintf("the guest's own clock around its %d calls after 10 of warm-up (`request-timed.js`), median of %d runs", requestCalls, b.Reps)),
		row("a GET from the host, loopback", directCall, fmt.Sprintf("%d GETs / %d, in the bench", requestCalls, requestCalls)),
	})
	b.Report.Para("1 MB of input adds %s through pmjail and %s to bare Deno reading and parsing it, so pmjail's own share is %s; 1 MB of source adds %s through pmjail and %s to bare Deno, pmjail's share %s. The targets below read \"1 MB adds ≤ 5 ms\" as pmjail's share: what carrying the megabyte into the jail costs over Deno doing the same work on it (reading and analysing a module, parsing JSON), which no channel can take away.", signedMS(inputAdded), signedMS(inputBare), signedMS(inputOver), signedMS(sourceAdded), signedMS(sourceBare), signedMS(sourceOver))

	b.Report.Target("JS host.log.info ≤ 30 µs per call", us(jsCall), jsCall <= 30*time.Microsecond)
	b.Report.Target("Python pmjail.log.info ≤ 60 µs per call", us(pyCall), pyCall <= 60*time.Microsecond)
	ratio := Ratio(reqCall, directCall)
	b.Report.Target("host.request.send (loopback) ≤ 1.5× a direct request from the host", fmt.Sprintf("%.2f× (%s vs %s)", ratio, us(reqCall), us(directCall)), ratio <= 1.5)
	b.Report.Target("1 MB of input adds ≤ 5 ms over bare Deno reading it", fmt.Sprintf("%s (%s − %s)", signedMS(inputOver), signedMS(inputAdded), signedMS(inputBare)), inputOver <= 5*time.Millisecond)
	b.Report.Target("1 MB of source adds ≤ 5 ms over bare Deno running it", fmt.Sprintf("%s (%s − %s)", signedMS(sourceOver), signedMS(sourceAdded), signedMS(sourceBare)), sourceOver <= 5*time.Millisecond)
	return nil
}

// timedInside runs argv reps times in the scratch directory, each run
// printing "ns/call N" as timed by the guest's own clock, and returns the
// median.
func (b *Bench) timedInside(ctx context.Context, argv []string, reps int) (time.Duration, error) {
	var per []time.Duration
	for range reps {
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = b.Work
		out, err := cmd.Output()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", strings.Join(argv, " "), err)
		}
		var ns int64
		if _, err := fmt.Sscanf(strings.TrimSpace(string(out)), "ns/call %d", &ns); err != nil {
			return 0, fmt.Errorf("%s: output %q: %w", strings.Join(argv, " "), tail(string(out)), err)
		}
		per = append(per, time.Duration(ns))
	}
	return Summarize(per).Median, nil
}

func us(d time.Duration) string {
	if d < 0 {
		return fmt.Sprintf("−%.1f µs", float64(-d)/1e3)
	}
	return fmt.Sprintf("%.1f µs", float64(d)/1e3)
}

// writeBrokerFiles writes the section's guest programs and input into the
// scratch directory.
func (b *Bench) writeBrokerFiles() error {
	pad := strings.Repeat("a", bigSize)
	input := `{"s":"` + pad[:bigSize-len(`{"s":""}`)] + `"}`
	src := "const s = \"\";\nconsole.log(\"hello\", s.length);\n"
	src = strings.Replace(src, `""`, `"`+pad[:bigSize-len(src)]+`"`, 1)
	files := map[string]string{
		"log.js":       fmt.Sprintf("for (let i = 0; i < %d; i++) await host.log.info(\"x\");\nconsole.log(\"hello\");\n", logCalls),
		"log.py":       fmt.Sprintf("import pmjail\nfor _ in range(%d):\n    pmjail.log.info(\"x\")\nprint(\"hello\")\n", logCalls),
		"log-timed.js": fmt.Sprintf("const t = performance.now();\nfor (let i = 0; i < %d; i++) await host.log.info(\"x\");\nconsole.log(\"ns/call\", Math.round((performance.now() - t) * 1e6 / %d));\n", logCalls, logCalls),
		"log-timed.py": fmt.Sprintf("import time, pmjail\nt = time.perf_counter()\nfor _ in range(%d):\n    pmjail.log.info(\"x\")\nprint(\"ns/call\", round((time.perf_counter() - t) * 1e9 / %d))\n", logCalls, logCalls),
		"input.json":   input,
		"input.js":     "const input = JSON.parse(Deno.readTextFileSync(\"input.json\"));\nconsole.log(\"hello\", typeof input);\n",
		"big.js":       src,
	}
	for name, text := range files {
		if err := os.WriteFile(b.work(name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// pipePingPong is the floor under a call: n round trips of one byte
// between two OS threads over a pipe pair, each blocking in read(2) as
// the guest's prompt calls do, per round trip.
func pipePingPong(n int) (time.Duration, error) {
	var there, back [2]int
	if err := unix.Pipe2(there[:], unix.O_CLOEXEC); err != nil {
		return 0, os.NewSyscallError("pipe2", err)
	}
	if err := unix.Pipe2(back[:], unix.O_CLOEXEC); err != nil {
		unix.Close(there[0])
		unix.Close(there[1])
		return 0, os.NewSyscallError("pipe2", err)
	}
	defer func() {
		for _, fd := range []int{there[0], there[1], back[0], back[1]} {
			unix.Close(fd)
		}
	}()
	echoed := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		buf := []byte{0}
		for range n {
			if _, err := unix.Read(there[0], buf); err != nil {
				echoed <- os.NewSyscallError("read", err)
				return
			}
			if _, err := unix.Write(back[1], buf); err != nil {
				echoed <- os.NewSyscallError("write", err)
				return
			}
		}
		echoed <- nil
	}()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	buf := []byte{1}
	start := time.Now()
	for range n {
		if _, err := unix.Write(there[1], buf); err != nil {
			return 0, os.NewSyscallError("write", err)
		}
		if _, err := unix.Read(back[0], buf); err != nil {
			return 0, os.NewSyscallError("read", err)
		}
	}
	took := time.Since(start)
	if err := <-echoed; err != nil {
		return 0, err
	}
	return took / time.Duration(n), nil
}

// dispatchPerCall runs BenchmarkBrokerDispatch in this run, for its time
// per call.
func (b *Bench) dispatchPerCall(ctx context.Context) (time.Duration, error) {
	cmd := exec.CommandContext(ctx, "go", "test", "-run", "^$", "-bench", "^BenchmarkBrokerDispatch$", "-benchtime", "20000x", "-count", "1", "./ipc/")
	cmd.Dir = b.Root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("BenchmarkBrokerDispatch: %w: %s", err, tail(string(out)))
	}
	rows := parseGoBench("ipc", string(out))
	if len(rows) != 1 {
		return 0, fmt.Errorf("BenchmarkBrokerDispatch: no result in %s", tail(string(out)))
	}
	return time.Duration(rows[0].NsOp), nil
}

// loopbackOrigin starts an origin that serves "ok" on 127.0.0.1, in a
// process of its own (this binary, -origin): pmjail's supervisor and the
// bench's direct client then both reach it across processes, as a host
// program would. stop ends it.
func loopbackOrigin() (origin string, stop func(), err error) {
	self, err := os.Executable()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command(self, "-origin")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", nil, err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return "", nil, err
	}
	stop = func() {
		stdin.Close()
		if err := cmd.Wait(); err != nil {
			fmt.Fprintf(os.Stderr, "bench: loopback origin: %v\n", err)
		}
	}
	var addr string
	if _, err := fmt.Fscanln(stdout, &addr); err != nil {
		stop()
		return "", nil, fmt.Errorf("loopback origin: %w", err)
	}
	return "http://" + addr, stop, nil
}

// serveOrigin is the -origin role: it serves "ok" on 127.0.0.1, prints
// its address and returns once its standard input ends.
func serveOrigin() int {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Fprintf(os.Stderr, "bench -origin: %v\n", err)
		return 1
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })}
	go srv.Serve(ln)
	fmt.Println(ln.Addr())
	_, _ = io.Copy(io.Discard, os.Stdin)
	srv.Close()
	return 0
}

// directGets is n sequential GETs of url from the host with a new
// keep-alive client, each body read to its end.
func directGets(url string, n int) func(context.Context) error {
	return func(ctx context.Context) error {
		tr := &http.Transport{Proxy: nil, ForceAttemptHTTP2: true}
		defer tr.CloseIdleConnections()
		client := &http.Client{Transport: tr}
		for range n {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				return err
			}
			if string(body) != "ok" {
				return fmt.Errorf("GET %s: body %q", url, body)
			}
		}
		return nil
	}
}
