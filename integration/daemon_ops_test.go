package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/pmjail/pmjail/api"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/jail"
)

var sampleLabel = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"`)

// metricSum adds up the samples of name in Prometheus text whose labels
// include want: a label the test does not name (a tenant) is summed over.
func metricSum(t *testing.T, text, name string, want map[string]string) float64 {
	t.Helper()
	var sum float64
lines:
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		series, value := line[:i], line[i+1:]
		labels := map[string]string{}
		if open := strings.IndexByte(series, '{'); open >= 0 {
			for _, m := range sampleLabel.FindAllStringSubmatch(series[open:], -1) {
				labels[m[1]] = m[2]
			}
			series = series[:open]
		}
		if series != name {
			continue
		}
		for k, v := range want {
			if labels[k] != v {
				continue lines
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("sample %q: %v", line, err)
		}
		sum += f
	}
	return sum
}

// checkLogLines fails the test on a daemon log line that is not one JSON
// object with each key once and no null.
func checkLogLines(t *testing.T, logs string) {
	t.Helper()
	for _, line := range strings.Split(strings.TrimSpace(logs), "\n") {
		dec := json.NewDecoder(strings.NewReader(line))
		if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
			t.Errorf("log line is not JSON: %s", line)
			continue
		}
		seen := map[string]bool{}
		for dec.More() {
			tok, err := dec.Token()
			if err != nil {
				t.Errorf("log line %s: %v", line, err)
				break
			}
			var v json.RawMessage
			if err := dec.Decode(&v); err != nil {
				t.Errorf("log line %s: %v", line, err)
				break
			}
			key := tok.(string)
			if seen[key] {
				t.Errorf("key %q twice in %s", key, line)
			}
			seen[key] = true
			if string(v) == "null" {
				t.Errorf("key %q is null in %s", key, line)
			}
		}
	}
}

// TestDaemonMetricsListener scrapes a real daemon's metrics listener: it
// serves /metrics, with the operators' series, and nothing else; a
// refused reload shows in /v1/health and the metrics.
func TestDaemonMetricsListener(t *testing.T) {
	dir := daemonDir(t)
	d := startDaemon(t, dir, `{"version": 1, "max_concurrency": 2, "metrics": {"listen": "127.0.0.1:0"}}`)
	m := regexp.MustCompile(`"msg":"serving metrics","listen":"([^"]+)"`).FindStringSubmatch(d.logs.String())
	if m == nil {
		t.Fatalf("no serving metrics line in the log:\n%s", d.logs)
	}
	base := "http://" + m[1]
	hc := &http.Client{Timeout: 30 * time.Second}
	defer hc.CloseIdleConnections()
	do := func(method, path string) (int, string) {
		t.Helper()
		req, err := http.NewRequest(method, base+path, strings.NewReader(`{"runtime": "deno", "source": "1"}`))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := d.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("hi")`})
	if err != nil || res.Status != jail.StatusOK {
		t.Fatalf("run: %v %+v", err, res)
	}
	status, text := do(http.MethodGet, "/metrics")
	if status != http.StatusOK {
		t.Fatalf("GET /metrics on %s: %d %s", base, status, text)
	}
	deno := map[string]string{"runtime": "deno", "status": "ok"}
	for name, want := range map[string]float64{
		"pmjail_runs_total":                   1,
		"pmjail_run_duration_seconds_count":   1,
		"pmjail_queue_wait_seconds_count":     1,
		"pmjail_run_cpu_seconds_count":        1,
		"pmjail_run_peak_memory_bytes_count":  1,
		"pmjail_config_reload_failures_total": 0,
	} {
		labels := deno
		if strings.HasPrefix(name, "pmjail_config") {
			labels = nil
		}
		if n := metricSum(t, text, name, labels); n != want {
			t.Errorf("%s%v: %v, want %v", name, labels, n, want)
		}
	}
	if n := metricSum(t, text, "pmjail_run_duration_seconds_bucket", map[string]string{"runtime": "deno", "le": "0.001"}); n != 0 {
		t.Errorf("a Deno run in the 1 ms bucket: %v", n)
	}
	if !regexp.MustCompile(`(?m)^pmjail_build_info\{go="go[^"]+",version="[^"]+"\} 1$`).MatchString(text) {
		t.Errorf("no pmjail_build_info{go,version} 1 in:\n%s", text)
	}
	if n := metricSum(t, text, "pmjail_posture_layer", map[string]string{"layer": "seccomp"}); n != 1 {
		t.Errorf("pmjail_posture_layer{layer=seccomp}: %v, want 1", n)
	}
	for _, r := range [][2]string{{http.MethodPost, "/v1/runs"}, {http.MethodGet, "/v1/health"}, {http.MethodGet, "/v1/posture"}} {
		if status, body := do(r[0], r[1]); status != http.StatusNotFound {
			t.Errorf("%s %s on the metrics listener: %d %s, want 404", r[0], r[1], status, body)
		}
	}

	// A reload of a config that no longer parses is refused, and said so.
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(`{"version": 1, "max_queue": -5}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	var h *api.Health
	for deadline := time.Now().Add(30 * time.Second); ; {
		if h, err = d.c.Health(ctx); err != nil {
			t.Fatal(err)
		}
		if h.LastReload != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := h.LastReload; r == nil || r.OK || !strings.Contains(r.Error, "max_queue") {
		t.Errorf("last_reload after a refused reload: %+v, want not ok, naming max_queue", r)
	}
	if _, text = do(http.MethodGet, "/metrics"); metricSum(t, text, "pmjail_config_reload_failures_total", nil) != 1 {
		t.Errorf("pmjail_config_reload_failures_total after a refused reload: want 1")
	}
	checkLogLines(t, d.logs.String())
}

// A daemon that cannot start says why in the JSON its log is in, naming
// the field; --check-config says the same without starting.
func TestDaemonStartFailureAndCheckConfig(t *testing.T) {
	dir := daemonDir(t)
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"version": 1, "metrics": {"listen": "9464"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := func(args ...string) (int, string, string) {
		t.Helper()
		var stdout, stderr bytes.Buffer
		cmd := exec.Command(pmjail, args...)
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return cmd.ProcessState.ExitCode(), stdout.String(), stderr.String()
	}
	sock := filepath.Join(dir, "pmjail.sock")
	code, _, stderr := run("serve", "--socket", sock, "--config", bad)
	if code != 125 {
		t.Errorf("serve with a bad config: exit %d, want 125", code)
	}
	var line map[string]any
	if err := json.Unmarshal([]byte(strings.TrimSpace(stderr)), &line); err != nil {
		t.Errorf("start-up failure is not one JSON line: %q", stderr)
	} else if line["level"] != "ERROR" || !strings.Contains(fmt.Sprint(line["err"]), "metrics.listen") {
		t.Errorf("start-up failure %v: want level ERROR, err naming metrics.listen", line)
	}
	checkLogLines(t, stderr)
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a socket after a failed start: %v", err)
	}

	code, stdout, stderr := run("serve", "--check-config", "--config", bad)
	if code != 1 || stdout != "" || !strings.Contains(stderr, "metrics.listen") {
		t.Errorf("--check-config of a bad config: exit %d, stdout %q, stderr %q; want 1, the field named", code, stdout, stderr)
	}
	good := filepath.Join(dir, "good.json")
	if err := os.WriteFile(good, []byte(`{"version": 1, "metrics": {"listen": "127.0.0.1:9464"}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr = run("serve", "--socket", sock, "--check-config", "--config", good)
	if code != 0 || stdout != "OK\n" || stderr != "" {
		t.Errorf("--check-config of a good config: exit %d, stdout %q, stderr %q; want 0, OK", code, stdout, stderr)
	}
	if _, err := os.Stat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("--check-config made a socket: %v", err)
	}
}
