package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"github.com/pmjail/pmjail/api"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/jail"
)

// TestDaemonRefusesRepeatedAndCaseFoldedKeys: a job whose bytes two
// parsers could read as two programs (a key twice, a key in another case
// beside or instead of its field) is refused over the real socket with
// 400 and the key named, before anything runs.
func TestDaemonRefusesRepeatedAndCaseFoldedKeys(t *testing.T) {
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 0, "0660"))
	for _, tc := range []struct{ body, field, msg string }{
		{`{"runtime":"deno","source":"console.log(1)","source":"console.log(2)"}`, "source", "duplicate key"},
		{`{"RUNTIME":"deno","source":"console.log(1)"}`, "RUNTIME", `unknown field (keys match case: want "runtime")`},
		{`{"runtime":"deno","Source":"console.log(1)"}`, "Source", `unknown field (keys match case: want "source")`},
		{`{"runtime":"deno","source":"console.log(1)","Source":"console.log(2)"}`, "Source", `unknown field (keys match case: want "source")`},
		{`{"runtime":"deno","source":"1","limits":{"memory":"64M","memory":"512M"}}`, "limits.memory", "duplicate key"},
		{`{"runtime":"deno","source":"1","input":{"n":1,"n":2}}`, "input.n", "duplicate key"},
	} {
		status, e := postJob(t, d.sock, tc.body)
		if status != http.StatusBadRequest || e.Code != "invalid_job" || e.Field != tc.field || e.Message != tc.field+": "+tc.msg {
			t.Errorf("%s: %d %+v, want 400 invalid_job at %q saying %q", tc.body, status, e, tc.field, tc.msg)
		}
	}
	m, err := d.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if metricSum(t, m, "pmjail_runs_total", map[string]string{"status": "ok"}) != 0 {
		t.Errorf("a refused job ran:\n%s", grepLines(m, "pmjail_runs_total"))
	}
}

// TestDaemonCancelledRun: a client that hangs up mid-run, and a run a
// shutdown ends after its grace, end with status cancelled, counted as
// such, not as internal_error (which an operator alerts on).
func TestDaemonCancelledRun(t *testing.T) {
	d := startDaemon(t, daemonDir(t), `{"version": 1, "max_concurrency": 2, "max_queue": 0, "shutdown_grace": "1s"}`)
	ctx := context.Background()
	const slow = `console.log("up"); await new Promise(r => setTimeout(r, 60000))`

	// The client's connection closes once its run has printed.
	conn, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := json.Marshal(&api.Job{Runtime: "deno", Source: slow})
	fmt.Fprintf(conn, "POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\nAccept: %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s",
		api.NDJSON, len(body), body)
	_ = conn.SetReadDeadline(time.Now().Add(time.Minute))
	if !readUntil(conn, `"type":"stdout"`) {
		t.Fatalf("the run did not print within a minute: %s", d.logs)
	}
	conn.Close()
	answered := func() bool {
		return strings.Contains(grepLines(d.logs.String(), `"msg":"run answered"`), `"status":"cancelled"`)
	}
	if !waitUntil(30*time.Second, answered) {
		t.Fatalf("the run of a client that hung up is not logged as cancelled:\n%s", d.logs)
	}
	m, err := d.c.Metrics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if metricSum(t, m, "pmjail_runs_total", map[string]string{"status": "cancelled"}) != 1 || metricSum(t, m, "pmjail_runs_total", map[string]string{"status": "internal_error"}) != 0 {
		t.Errorf("the run of a client that hung up is not counted as cancelled:\n%s", grepLines(m, "pmjail_runs_total"))
	}

	// SIGTERM with a run in flight: after the 1s grace the run is
	// cancelled, and its client still gets the result.
	got := make(chan *jail.Result, 1)
	failed := make(chan error, 1)
	started := make(chan struct{})
	go func() {
		printed := false
		res, err := d.c.Stream(ctx, &api.Job{Runtime: "deno", Source: slow}, func(ev api.Event) {
			if !printed && ev.Type == api.EventStdout {
				printed = true
				close(started)
			}
		})
		if err != nil {
			failed <- err
			return
		}
		got <- res
	}()
	select {
	case <-started:
	case err := <-failed:
		t.Fatalf("the run to shut down: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("the run to shut down did not print within a minute")
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case res := <-got:
		if res.Status != jail.StatusCancelled || res.ExitCode != 125 || res.Error == nil || !strings.Contains(res.Error.Message, "shut down") {
			t.Errorf("a run cancelled by shutdown: status %s exit %d error %+v, want cancelled, 125, the shutdown named", res.Status, res.ExitCode, res.Error)
		}
	case err := <-failed:
		t.Fatalf("a run cancelled by shutdown: %v, want its result", err)
	case <-time.After(time.Minute):
		t.Fatal("no result within a minute of SIGTERM")
	}
	<-d.done
	if code := d.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("pmjail serve exited %d after SIGTERM", code)
	}
	if n := strings.Count(grepLines(d.logs.String(), `"msg":"run answered"`), `"status":"cancelled"`); n != 2 {
		t.Errorf("%d runs logged as cancelled, want 2:\n%s", n, d.logs)
	}
	if strings.Contains(d.logs.String(), `"status":"internal_error"`) {
		t.Errorf("a cancelled run logged as internal_error:\n%s", d.logs)
	}
}

// refusal is the error object of the API's answer.
type refusal struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Field   string `json:"field"`
}

// postJob posts a raw job body and returns the status and the refusal.
func postJob(t *testing.T, sock, body string) (int, refusal) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	defer hc.CloseIdleConnections()
	resp, err := hc.Post("http://pmjail/v1/runs", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb struct {
		Error refusal `json:"error"`
	}
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &eb); err != nil {
		t.Fatalf("%s: answer %q: %v", body, data, err)
	}
	return resp.StatusCode, eb.Error
}

// readUntil reads r until what it has read holds s; false at EOF or an
// error first.
func readUntil(r io.Reader, s string) bool {
	var seen strings.Builder
	br := bufio.NewReader(r)
	buf := make([]byte, 4096)
	for {
		n, err := br.Read(buf)
		seen.Write(buf[:n])
		if strings.Contains(seen.String(), s) {
			return true
		}
		if err != nil {
			return false
		}
	}
}

// waitUntil polls cond until it holds or d passes: for what the daemon
// does after its answer is out (its log line), which no event marks.
func waitUntil(d time.Duration, cond func() bool) bool {
	for deadline := time.Now().Add(d); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return true
		}
	}
	return cond()
}

func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
