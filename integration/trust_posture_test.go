package integration

import (
	"bytes"
	"context"
	"encoding/json"
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
	"github.com/pmjail/pmjail/jail"
)

// The daemon's host posture decides what every later run in mode auto
// gets: these tests attack it through GET /v1/posture?refresh=1.

// probeJailMarker is in the command line of the probe role run inside the
// probe jail (posture.ProbeRole, then "inside"): one such process is one
// probe jail.
const probeJailMarker = "__pmjail_probe\x00inside"

// probeJails returns the probe jails running below the daemon now.
func probeJails(daemonPID int) []int {
	var out []int
	for _, p := range descendants(daemonPID) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); bytes.Contains(b, []byte(probeJailMarker)) {
			out = append(out, p)
		}
	}
	return out
}

// anyProbe reports whether a process of the probe role (a namespace probe
// or a probe jail) runs below the daemon.
func anyProbe(daemonPID int) bool {
	for _, p := range descendants(daemonPID) {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p)); bytes.Contains(b, []byte("__pmjail_probe")) {
			return true
		}
	}
	return false
}

// postureGet sends GET /v1/posture?query on the daemon's socket and
// returns the status and body.
func postureGet(tb testing.TB, ctx context.Context, sock, query string) (int, []byte, error) {
	hc := &http.Client{Transport: checkedTransport(tb, &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}})}
	defer hc.CloseIdleConnections()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://pmjail/v1/posture?"+query, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, body, err
}

// needCore skips (or, under CI, fails) where the host cannot prove the
// containment core: then there is nothing for a client to switch off.
func needCore(t *testing.T, p *posture) {
	t.Helper()
	for _, l := range coreLayers {
		if p.state(l) != "applied" {
			why := "this host does not prove " + l + " at all"
			if os.Getenv("CI") == "true" {
				t.Fatal(why)
			}
			t.Skip(why)
		}
	}
}

func daemonPosture(t *testing.T, d *daemon) *posture {
	t.Helper()
	p, err := d.c.Posture(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return decodePosture(t, raw)
}

// probedAt is when the daemon's posture was last probed.
func probedAt(t *testing.T, d *daemon) time.Time {
	t.Helper()
	p, err := d.c.Posture(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return p.ProbedAt
}

// waitProbedAfter waits until the daemon's posture comes from a probe
// later than the one at before.
func waitProbedAfter(t *testing.T, d *daemon, before time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for !probedAt(t, d).After(before) {
		if time.Now().After(deadline) {
			t.Fatalf("the refresh's probe did not end within a minute: %s", d.logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// hangUpMidProbe asks the daemon for a refresh and hangs up at once, as
// a client that gives up would: the refresh's probe is under way or about
// to be, and the connection's end cancels the request.
func hangUpMidProbe(t *testing.T, d *daemon) {
	t.Helper()
	conn, err := net.Dial("unix", d.sock)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, "GET /v1/posture?refresh=1 HTTP/1.1\r\nHost: pmjail\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !anyProbe(d.pid()) {
		if time.Now().After(deadline) {
			t.Fatalf("no probe within 30s of a refresh: %s", d.logs)
		}
		time.Sleep(time.Millisecond)
	}
	conn.Close()
}

// A client that asks for a refresh and hangs up while the probe runs must
// not switch layers off: the host proved them at start, and every later
// run in mode auto still gets them.
func TestTrust_PostureRefreshHangupKeepsLayers(t *testing.T) {
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 8, "0660"))
	needCore(t, daemonPosture(t, d))

	before := probedAt(t, d)
	hangUpMidProbe(t, d)
	waitProbedAfter(t, d, before)

	p := daemonPosture(t, d)
	for _, l := range coreLayers {
		if st := p.state(l); st != "applied" {
			t.Errorf("after a client hung up mid-refresh, the daemon's %s is %q, want applied", l, st)
		}
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// The guest only tries to lock one of pmjail's files in its root,
	// harmless whatever the jail.
	res, err := d.c.Run(ctx, &api.Job{Runtime: "deno", Mode: api.ModeAuto, Source: `
let locked = "denied";
try { Deno.openSync("/pmjail/bootstrap.js").lockSync(); locked = "locked" } catch (e) { locked = "denied: " + e.name }
console.log(JSON.stringify({locked}));
`})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != jail.StatusOK {
		t.Fatalf("the run: %s %+v %s", res.Status, res.Error, res.Stderr)
	}
	var out struct{ Locked string }
	if err := json.Unmarshal([]byte(res.Stdout), &out); err != nil {
		t.Fatalf("the run's output %q: %v", res.Stdout, err)
	}
	// The seccomp policy denies flock.
	if !strings.HasPrefix(out.Locked, "denied") || res.Denied["flock"] == 0 {
		t.Errorf("the guest's flock: %q, denied_syscalls %v; want it refused by the filter", out.Locked, res.Denied)
	}
	raw, err := json.Marshal(res.Posture)
	if err != nil {
		t.Fatal(err)
	}
	rp := decodePosture(t, raw)
	for _, l := range []string{"seccomp", "rootfs", "no_new_privs", "capabilities"} {
		if st := rp.state(l); st != "applied" {
			t.Errorf("a run in mode auto after the hang-up: %s is %q, want applied", l, st)
		}
	}
}

// Eight refreshes at once at max_concurrency 2 run one probe, not one
// each: a refresh joins the probe in flight.
func TestTrust_PostureRefreshSingleFlight(t *testing.T) {
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 8, "0660"))
	needCore(t, daemonPosture(t, d))
	startedBefore := strings.Count(d.logs.String(), `"msg":"posture probe started"`)

	stop := make(chan struct{})
	seen := map[int]bool{}
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		for {
			for _, p := range probeJails(d.pid()) {
				seen[p] = true
			}
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	statuses := make([]int, 8)
	errs := make([]error, 8)
	for i := range statuses {
		wg.Go(func() {
			var body []byte
			statuses[i], body, errs[i] = postureGet(t, ctx, d.sock, "refresh=1")
			if errs[i] == nil && statuses[i] != http.StatusOK {
				errs[i] = fmt.Errorf("%d %s", statuses[i], body)
			}
		})
	}
	wg.Wait()
	close(stop)
	<-watched
	for i, err := range errs {
		if err != nil {
			t.Errorf("refresh %d: %v", i, err)
		}
	}
	if len(seen) > 1 {
		t.Errorf("eight parallel refreshes started %d probe jails, want at most one", len(seen))
	}
	if n := strings.Count(d.logs.String(), `"msg":"posture probe started"`) - startedBefore; n != 1 {
		t.Errorf("eight parallel refreshes logged %d probes, want one", n)
	}
}

// TestTrust_PostureRefreshPeerHelper is not a test: the refresh test runs
// the test binary as another uid in this mode to call the daemon as that
// peer.
func TestTrust_PostureRefreshPeerHelper(t *testing.T) {
	sock := os.Getenv("PMJAIL_POSTURE_HELPER_SOCKET")
	if sock == "" {
		t.Skip("helper mode only")
	}
	for _, q := range []string{"", "refresh=1"} {
		status, body, err := postureGet(t, context.Background(), sock, q)
		var e struct {
			Error struct{ Code string }
		}
		_ = json.Unmarshal(body, &e)
		fmt.Printf("QUERY %q STATUS %d %s err=%v\n", q, status, e.Error.Code, err)
	}
}

// A peer allowed to run jobs but not the daemon's own uid reads the
// posture and may not have the host probed again.
func TestTrust_PostureRefreshOtherUID(t *testing.T) {
	dir := daemonDir(t)
	d := startDaemon(t, dir, `{"version": 1, "max_concurrency": 2, "max_queue": 8, "socket": {"mode": "0666"}, "allow": {"uids": [65534]}}`)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	helper := filepath.Join(dir, "helper.test")
	copyFile(t, self, helper)
	startedBefore := strings.Count(d.logs.String(), `"msg":"posture probe started"`)
	cmd := exec.Command(helper, "-test.run=^TestTrust_PostureRefreshPeerHelper$", "-test.v")
	cmd.Env = []string{"PMJAIL_POSTURE_HELPER_SOCKET=" + d.sock, "PMJAIL_BIN=" + pmjail, "PATH=/usr/bin:/bin"}
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("helper as uid 65534: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), `QUERY "" STATUS 200`) {
		t.Errorf("uid 65534, allowed to run jobs, could not read the posture:\n%s", out)
	}
	if !strings.Contains(string(out), `QUERY "refresh=1" STATUS 403 refresh_forbidden`) {
		t.Errorf("uid 65534 was not refused a refresh with 403 refresh_forbidden:\n%s", out)
	}
	if n := strings.Count(d.logs.String(), `"msg":"posture probe started"`) - startedBefore; n != 0 {
		t.Errorf("another uid's refresh started %d probes", n)
	}
}
