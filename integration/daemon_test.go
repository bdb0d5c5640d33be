package integration

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
)

// daemon is one `pmjail serve` started by a test.
type daemon struct {
	cmd  *exec.Cmd
	sock string
	dir  string
	logs *lockedBuffer
	c    *client.Client
	done chan struct{}
}

type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// daemonDir is a directory any uid can traverse, for a socket that a
// test connects to as another user.
func daemonDir(tb testing.TB) string {
	dir, err := os.MkdirTemp("", "itest-daemon-")
	if err != nil {
		tb.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// startDaemon starts `pmjail serve` with config cfg in dir and waits until
// it answers; it is stopped with SIGTERM at the end of the test.
func startDaemon(tb testing.TB, dir, cfg string) *daemon {
	tb.Helper()
	cfgPath := filepath.Join(dir, "config.json")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		tb.Fatal(err)
	}
	d := &daemon{sock: filepath.Join(dir, "pmjail.sock"), dir: dir, logs: &lockedBuffer{}, done: make(chan struct{})}
	d.cmd = exec.Command(pmjail, "serve", "--socket", d.sock, "--config", cfgPath)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	go func() { _ = d.cmd.Wait(); close(d.done) }()
	d.c = checked(tb, d.sock)
	tb.Cleanup(func() { d.stop(tb) })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := d.c.Health(context.Background()); err == nil {
			checkConfig(tb, cfg) // the daemon took it: the schema must too
			return d
		}
		select {
		case <-d.done:
			tb.Fatalf("pmjail serve exited: %s", d.logs)
		default:
		}
		if time.Now().After(deadline) {
			tb.Fatalf("pmjail serve did not answer within 30s: %s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (d *daemon) pid() int { return d.cmd.Process.Pid }

// stop sends SIGTERM and waits; a daemon that does not stop is killed and
// the test fails.
func (d *daemon) stop(tb testing.TB) {
	d.c.Close()
	select {
	case <-d.done:
		return
	default:
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
		if code := d.cmd.ProcessState.ExitCode(); code != 0 {
			tb.Errorf("pmjail serve exited %d after SIGTERM: %s", code, d.logs)
		}
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.done
		tb.Errorf("pmjail serve did not stop within 60s of SIGTERM")
	}
}

// kill SIGKILLs the daemon and reaps it.
func (d *daemon) kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
}

const baseConfig = `{"version": 1, "max_concurrency": %d, "max_queue": %d, "socket": {"mode": "%s"}}`

func TestDaemonEndToEnd(t *testing.T) {
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	res, err := d.c.Run(ctx, &api.Job{Runtime: "deno", Source: `export default (input) => ({sum: input.a + input.b})`,
		Input: json.RawMessage(`{"a": 2, "b": 40}`), Labels: map[string]string{"team": "ci", "build.id": "4-2"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusOK || string(res.Value) != `{"sum":42}` {
		t.Errorf("JS run: %s value %s %+v", res.Status, res.Value, res.Error)
	}
	// The labels an operator would look a client's run up by are in the
	// daemon's log, not only in the result.
	if !finishedWith(d, res.ID, `"labels":{"build.id":"4-2","team":"ci"}`) {
		t.Errorf("the run finished line of %s lacks its labels:\n%s", res.ID, grepLines(d.logs.String(), res.ID))
	}
	res, err = d.c.Run(ctx, &api.Job{Runtime: "python", Source: "import sys\nprint('py', sys.version_info[0])\n"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusOK || res.Stdout != "py 3\n" {
		t.Errorf("Python run: %s stdout %q %+v", res.Status, res.Stdout, res.Error)
	}

	var types []string
	res, err = d.c.Stream(ctx, &api.Job{Runtime: "deno",
		Source:       `export default async (input, ctx) => { console.log("a"); await ctx.host.log.warn("half way"); console.log("b"); return 1 }`,
		Capabilities: api.Capabilities{Log: true}},
		func(ev api.Event) { types = append(types, ev.Type) })
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusOK || len(res.Logs) != 1 {
		t.Errorf("streamed run: %s logs %+v %+v", res.Status, res.Logs, res.Error)
	}
	joined := strings.Join(types, ",")
	if !strings.Contains(joined, "stdout") || !strings.Contains(joined, "log") || !strings.HasSuffix(joined, ",result") {
		t.Errorf("events %s: want stdout and log events before the result", joined)
	}

	if p, err := d.c.Posture(ctx); err != nil || p.Decision == "" || len(p.Layers) == 0 {
		t.Errorf("posture %+v: %v", p, err)
	}
	if h, err := d.c.Health(ctx); err != nil || h.Status != "ok" || h.PID != d.pid() {
		t.Errorf("health %+v: %v", h, err)
	}
	m, err := d.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if n := metricSum(t, m, "pmjail_runs_total", map[string]string{"status": "ok", "tenant": "others"}); n != 3 {
		t.Errorf("pmjail_runs_total{status=ok,tenant=others}: %v, want 3", n)
	}
	if n := metricSum(t, m, "pmjail_run_duration_seconds_count", map[string]string{"runtime": "python", "tenant": "others"}); n != 1 {
		t.Errorf("pmjail_run_duration_seconds_count{runtime=python,tenant=others}: %v, want 1", n)
	}
	for _, want := range []string{
		"pmjail_runs_in_flight 0", "pmjail_runs_queued 0", `pmjail_requests_rejected_total{reason="queue_full"} 0`, "process_resident_memory_bytes"} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	// Every line the daemon logs about a run carries its job id.
	for _, line := range strings.Split(d.logs.String(), "\n") {
		if strings.Contains(line, `"msg":"run `) && !strings.Contains(line, `"job":"`) {
			t.Errorf("log line without the job id: %s", line)
		}
	}
}

// `pmjail submit` is `pmjail run` through a daemon: the output passes
// through, the exit code mirrors the run, --json prints the result object,
// and a refusal is one line that names the flag at fault.
func TestSubmit(t *testing.T) {
	dir := daemonDir(t)
	d := startDaemon(t, dir, fmt.Sprintf(baseConfig, 1, 4, "0660"))
	script := filepath.Join(dir, "exit3.js")
	if err := os.WriteFile(script, []byte(`console.log("out"); console.error("err"); Deno.exit(3);`), 0o644); err != nil {
		t.Fatal(err)
	}
	inv := pmjailCmd(t, "", "submit", "--socket", d.sock, script)
	if inv.ExitCode != 3 || inv.Stdout != "out\n" || inv.Stderr != "err\n" {
		t.Errorf("submit: exit %d stdout %q stderr %q, want 3, out and err", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	inv = pmjailCmd(t, "", "submit", "--socket", d.sock, "--json", "--cap", "log", "--input", `{"name":"ada"}`,
		filepath.Join(repoRoot, "examples", "handler.ts"))
	if r := inv.Result; inv.ExitCode != 0 || r == nil || r.Status != "ok" || !strings.Contains(string(r.Value), "hello, ada") {
		t.Errorf("submit --json: exit %d stdout %q stderr %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--memory", "8M", script}, "pmjail: submit: --memory: 8M is below the 16M minimum"},
		{[]string{"--profile", "/etc/passwd", script}, `pmjail: submit: --profile: "/etc/passwd": only built-in profile names are accepted here`},
		{[]string{"--mode", "sometimes", script}, `pmjail: submit: --mode "sometimes": want auto or required`},
	} {
		inv := pmjailCmd(t, "", append([]string{"submit", "--socket", d.sock}, c.args...)...)
		if inv.ExitCode != 125 || inv.Stdout != "" || inv.Stderr != c.want+"\n" {
			t.Errorf("submit %q: exit %d stdout %q stderr %q, want 125 and %q", c.args, inv.ExitCode, inv.Stdout, inv.Stderr, c.want)
		}
	}
}

// TestDaemonPeerHelper is not a test: TestDaemonRefusals runs the test
// binary as another uid in this mode to call the daemon as that peer.
func TestDaemonPeerHelper(t *testing.T) {
	sock := os.Getenv("PMJAIL_PEER_HELPER_SOCKET")
	if sock == "" {
		t.Skip("helper mode only")
	}
	_, err := checked(t, sock).Health(context.Background())
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		fmt.Printf("STATUS %d %s\n", apiErr.StatusCode, apiErr.Code)
		return
	}
	fmt.Printf("STATUS 200 err=%v\n", err)
}

func TestDaemonRefusals(t *testing.T) {
	dir := daemonDir(t)
	// Mode 0666 lets uid 65534 connect at all: SO_PEERCRED must stop it.
	d := startDaemon(t, dir, (`{"version": 1, "max_concurrency": 1, "max_queue": -1, "socket": {"mode": "0666"},
		"ceiling": {"limits": {"memory": "512M", "timeout": "60s"}}}`))
	ctx := context.Background()

	t.Run("unauthorised peer", func(t *testing.T) {
		self, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		helper := filepath.Join(dir, "helper.test")
		copyFile(t, self, helper)
		cmd := exec.Command(helper, "-test.run=^TestDaemonPeerHelper$", "-test.v")
		cmd.Env = []string{"PMJAIL_PEER_HELPER_SOCKET=" + d.sock, "PMJAIL_BIN=" + pmjail, "PATH=/usr/bin:/bin"}
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("helper as uid 65534: %v\n%s", err, out)
		}
		if !strings.Contains(string(out), "STATUS 403 forbidden") {
			t.Errorf("uid 65534 was not refused with 403:\n%s", out)
		}
		// The daemon may log the refusal just after its answer is out.
		logged := func() bool {
			l := d.logs.String()
			return strings.Contains(l, `"msg":"peer refused"`) && strings.Contains(l, `"peer_uid":65534`)
		}
		for deadline := time.Now().Add(10 * time.Second); !logged() && time.Now().Before(deadline); {
			time.Sleep(10 * time.Millisecond)
		}
		if !logged() {
			t.Errorf("the refusal is not in the daemon's log:\n%s", d.logs)
		}
	})

	refused := func(req *api.Job) *client.Error {
		t.Helper()
		_, err := d.c.Run(ctx, req)
		var apiErr *client.Error
		if !errors.As(err, &apiErr) {
			t.Fatalf("%+v: %v, want a refusal", req, err)
		}
		return apiErr
	}
	t.Run("beyond the ceiling", func(t *testing.T) {
		e := refused(&api.Job{Runtime: "deno", Source: "1", Limits: mustLimits(t, `{"memory": "1G"}`)})
		if e.StatusCode != 400 || e.Field != "limits.memory" || !strings.Contains(e.Message, "ceiling") {
			t.Errorf("memory over the ceiling: %+v", e)
		}
	})
	// What the OpenAPI document refuses the daemon refuses too: a proxy
	// that holds jobs to the schema (here, the checked transport) must not
	// be got past by another spelling of what it lets by.
	t.Run("off-schema spellings", func(t *testing.T) {
		for _, rt := range []string{"PyThOn", "DENO"} {
			res, err := d.c.Run(ctx, &api.Job{Runtime: rt, Source: "1"})
			var e *client.Error
			if !errors.As(err, &e) {
				t.Errorf("runtime %q: ran (%+v, %v), want a refusal", rt, res, err)
				continue
			}
			if e.StatusCode != 400 || e.Code != api.CodeInvalidJob || e.Field != "runtime" || !strings.Contains(e.Message, `unknown runtime "`+rt+`"`) {
				t.Errorf("runtime %q: %+v, want a 400 naming field runtime", rt, e)
			}
		}
		for _, limits := range []string{`{"timeout": "+1s"}`, `{"memory": "+64M"}`} {
			body := `{"runtime": "deno", "source": "1", "limits": ` + limits + `}`
			if status := curlStatus(t, d.sock, strings.NewReader(body)); status != 400 {
				t.Errorf("limits %s: %d, want 400", limits, status)
			}
		}
	})
	t.Run("malformed and oversize", func(t *testing.T) {
		status := curlStatus(t, d.sock, strings.NewReader(`{"runtime": "deno", "source": 1}`))
		if status != 400 {
			t.Errorf("malformed JSON: %d, want 400", status)
		}
		big := `{"runtime": "deno", "source": "` + strings.Repeat("x", job.MaxRequestBytes) + `"}`
		if status := curlStatus(t, d.sock, strings.NewReader(big)); status != 413 {
			t.Errorf("oversize job: %d, want 413", status)
		}
	})
	t.Run("full", func(t *testing.T) {
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		started := make(chan struct{})
		failed := make(chan error, 1)
		var once sync.Once
		go func() {
			_, err := d.c.Stream(sctx, &api.Job{Runtime: "deno", Source: `console.log(0); await new Promise(r => setTimeout(r, 25000))`},
				func(api.Event) { once.Do(func() { close(started) }) })
			failed <- err
		}()
		select {
		case <-started:
		case err := <-failed:
			t.Fatalf("the slow run: %v", err)
		case <-time.After(time.Minute):
			t.Fatal("the slow run did not start within a minute")
		}
		e := refused(&api.Job{Runtime: "deno", Source: "1"})
		if e.StatusCode != 429 || e.RetryAfter <= 0 {
			t.Errorf("a run beyond concurrency 1 and queue 0: %+v", e)
		}
	})
}

func mustLimits(t *testing.T, s string) api.Limits {
	t.Helper()
	var l api.Limits
	if err := json.Unmarshal([]byte(s), &l); err != nil {
		t.Fatal(err)
	}
	return l
}

// curlStatus posts a raw body to /v1/runs, as curl --unix-socket would,
// and returns the HTTP status.
func curlStatus(t *testing.T, sock string, body io.Reader) int {
	t.Helper()
	hc := &http.Client{Transport: checkedTransport(t, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}})}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://pmjail/v1/runs", "application/json", body)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return resp.StatusCode
}

func copyFile(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
