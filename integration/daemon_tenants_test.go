package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"github.com/pmjail/pmjail/api"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/jail"
)

// Two tenants in one daemon, called over the real socket by two uids (the
// test binary re-run as each): alpha (by uid) and beta (by gid) each get
// their own ceiling, their own share of the slots, and beta its rate;
// root, in no tenant, is refused until a reload lets others in.
func TestDaemonTenants(t *testing.T) {
	dir := daemonDir(t)
	const (
		alphaUID = 65534 // nobody
		betaID   = 65533
	)
	config := func(others string) string {
		return fmt.Sprintf(`{"version": 1, "max_concurrency": 3, "max_queue": 4, "socket": {"mode": "0666"}, "others": %q,
		"ceiling": {"limits": {"memory": "512M", "timeout": "60s"}},
		"tenants": [
			{"name": "alpha", "match": {"uid": %d}, "max_concurrency": 1, "max_queue": -1},
			{"name": "beta", "match": {"gid": %d}, "ceiling": {"limits": {"memory": "256M"}},
				"max_concurrency": 1, "max_queue": -1, "rate": "2/min"}
		]}`, others, alphaUID, betaID)
	}
	d := startDaemon(t, dir, config("refuse"))

	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helperBin := filepath.Join(dir, "helper.test")
	copyFile(t, self, helperBin)
	helper := func(role string, id uint32) *exec.Cmd {
		cmd := exec.Command(helperBin, "-test.run=^TestDaemonTenantHelper$", "-test.v")
		cmd.Env = []string{"PMJAIL_TENANT_HELPER_SOCKET=" + d.sock, "PMJAIL_TENANT_HELPER_ROLE=" + role,
			"PMJAIL_BIN=" + pmjail, "PATH=/usr/bin:/bin"}
		cmd.Dir = dir
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: id, Gid: id, Groups: []uint32{}}}
		return cmd
	}

	// alpha holds its one slot with a slow run and reports on the way.
	alpha := helper("alpha", alphaUID)
	release, err := alpha.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := alpha.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	alpha.Stderr = alpha.Stdout
	if err := alpha.Start(); err != nil {
		t.Fatal(err)
	}
	var alphaOut strings.Builder
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	// read returns alpha's next report with the given head, failing the
	// test if alpha ends or a minute passes first (alphaDone, deferred,
	// then ends alpha).
	read := func(head string) string {
		t.Helper()
		timeout := time.After(time.Minute)
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("alpha ended before %s:\n%s", head, alphaOut.String())
				}
				alphaOut.WriteString(l + "\n")
				if strings.HasPrefix(l, head+" ") {
					return strings.TrimPrefix(l, head+" ")
				}
			case <-timeout:
				_ = alpha.Process.Kill()
				t.Fatalf("no %s from alpha within a minute:\n%s", head, alphaOut.String())
			}
		}
	}
	alphaDone := sync.OnceFunc(func() {
		_ = release.Close()
		for l := range lines {
			alphaOut.WriteString(l + "\n")
		}
		if err := alpha.Wait(); err != nil {
			t.Errorf("alpha helper: %v\n%s", err, alphaOut.String())
		}
	})
	defer alphaDone()

	// alpha's ceiling is the global one: 384M fits.
	if got := read("BIG"); got != "200 ok" {
		t.Errorf("alpha's 384M run: %s, want 200 ok", got)
	}
	read("SLOW") // alpha's one slot is taken
	if got := read("SECOND"); !strings.HasPrefix(got, "429 queue_full ") || !strings.Contains(got, "retry=1s") {
		t.Errorf("alpha beyond its share: %s, want 429 queue_full with Retry-After", got)
	}

	// beta, while alpha's slot is held, has its own ceiling, share and rate.
	outB, err := helper("beta", betaID).CombinedOutput()
	if err != nil {
		t.Fatalf("beta helper: %v\n%s", err, outB)
	}
	report := map[string]string{}
	for _, l := range strings.Split(string(outB), "\n") {
		if head, rest, ok := strings.Cut(l, " "); ok {
			report[head] = rest
		}
	}
	for head, want := range map[string]string{
		"BIG":  "400 invalid_job limits.memory retry=0s",
		"RUN1": "200 ok",
		"RUN2": "200 ok",
	} {
		if report[head] != want {
			t.Errorf("beta %s: %q, want %q\n%s", head, report[head], want, outB)
		}
	}
	// Two runs in a row used beta's 2/min: the next one is allowed 30 s
	// after the first, less the time the two took.
	got := report["RUN3"]
	_, retry, _ := strings.Cut(got, "retry=")
	wait, err := time.ParseDuration(retry)
	if !strings.HasPrefix(got, "429 rate_limited ") || err != nil || wait < 15*time.Second || wait > 30*time.Second {
		t.Errorf("beta over its rate: %q, want 429 rate_limited with Retry-After of up to 30s\n%s", got, outB)
	}
	alphaDone()

	// root matches no tenant, and the config does not let others in.
	_, err = d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: "1"})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 || !strings.Contains(apiErr.Message, "matches no tenant") {
		t.Errorf("root, in no tenant: %v, want 403 saying it matches no tenant", err)
	}

	// SIGHUP with others allowed: root now runs, under the global ceiling.
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(config("allow")), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); !strings.Contains(d.logs.String(), `"msg":"config reloaded"`); {
		if time.Now().After(deadline) {
			t.Fatalf("no reload within a minute of SIGHUP:\n%s", d.logs)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if res, err := d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: "1", Limits: mustLimits(t, `{"memory": "384M"}`)}); err != nil || res.Status != jail.StatusOK {
		t.Errorf("root after a reload with others allowed: %v %+v", err, res)
	}

	m, err := d.c.Metrics(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"pmjail_runs_total", map[string]string{"status": "ok", "tenant": "alpha"}, 1},
		{"pmjail_runs_total", map[string]string{"status": "ok", "tenant": "beta"}, 2},
		{"pmjail_runs_total", map[string]string{"status": "ok", "tenant": "others"}, 1},
		{"pmjail_run_duration_seconds_count", map[string]string{"runtime": "deno", "tenant": "beta"}, 2},
	} {
		if n := metricSum(t, m, c.name, c.labels); n != c.want {
			t.Errorf("%s%v: %v, want %v", c.name, c.labels, n, c.want)
		}
	}
	// Each tenant's series show before its first run of a kind; others'
	// too, from the reload that let them in.
	for _, want := range []string{`pmjail_requests_rejected_total{reason="rate_limited"} 1`,
		`pmjail_runs_total{runtime="python",status="ok",tenant="alpha"} 0`,
		`pmjail_runs_total{runtime="python",status="ok",tenant="others"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	logs := d.logs.String()
	for _, want := range []string{`"tenant":"alpha"`, `"tenant":"beta"`, `"code":"rate_limited"`} {
		if !strings.Contains(logs, want) {
			t.Errorf("the daemon's log lacks %s", want)
		}
	}
}

// TestDaemonTenantHelper is not a test: TestDaemonTenants runs the test
// binary as another uid in this mode to call the daemon as that tenant,
// printing one line per step.
func TestDaemonTenantHelper(t *testing.T) {
	sock := os.Getenv("PMJAIL_TENANT_HELPER_SOCKET")
	if sock == "" {
		t.Skip("helper mode only")
	}
	c := checked(t, sock)
	defer c.Close()
	ctx := context.Background()
	outcome := func(res *jail.Result, err error) string {
		if apiErr, ok := errors.AsType[*client.Error](err); ok {
			return fmt.Sprintf("%d %s %s retry=%v", apiErr.StatusCode, apiErr.Code, apiErr.Field, apiErr.RetryAfter)
		}
		if err != nil {
			return "error " + err.Error()
		}
		return "200 " + string(res.Status)
	}
	quick := func() *api.Job { return &api.Job{Runtime: "deno", Source: "1"} }
	big := &api.Job{Runtime: "deno", Source: "1", Limits: mustLimits(t, `{"memory": "384M"}`)}

	switch role := os.Getenv("PMJAIL_TENANT_HELPER_ROLE"); role {
	case "alpha":
		fmt.Println("BIG", outcome(c.Run(ctx, big)))
		sctx, cancel := context.WithCancel(ctx)
		defer cancel()
		started := make(chan struct{})
		slow := make(chan string, 1)
		go func() {
			var once sync.Once
			res, err := c.Stream(sctx, &api.Job{Runtime: "deno", Source: `console.log(0); await new Promise(r => setTimeout(r, 60000))`},
				func(api.Event) { once.Do(func() { close(started) }) })
			slow <- outcome(res, err)
		}()
		select {
		case <-started:
			fmt.Println("SLOW started")
		case got := <-slow:
			t.Fatalf("the slow run ended before it started: %s", got)
		}
		fmt.Println("SECOND", outcome(c.Run(ctx, quick())))
		// Hold the slot until the test is done with beta.
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
		<-slow
	case "beta":
		fmt.Println("BIG", outcome(c.Run(ctx, big)))
		fmt.Println("RUN1", outcome(c.Run(ctx, quick())))
		fmt.Println("RUN2", outcome(c.Run(ctx, quick())))
		fmt.Println("RUN3", outcome(c.Run(ctx, quick())))
	default:
		t.Fatalf("role %q", role)
	}
}
