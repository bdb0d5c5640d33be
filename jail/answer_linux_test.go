package jail

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/ipc"
)

// exitFrame is a shell command that says on the channel that the guest
// exits with code (0–9).
func exitFrame(code int) string {
	body := fmt.Sprintf(`{"type":"exit","code":%d}`, code)
	return `printf '\000\000\000\0` + octal(len(body)) + body + `' > /pmjail/channel/out`
}

// answeredRun runs script on a warm shell runtime (once the host's "go"
// line arrives) with an early answer, and returns the outcome Answer got
// and the one Run returned.
func answeredRun(t *testing.T, script string, outputLimit int64) (answered, ran *Outcome) {
	t.Helper()
	return answeredRunWith(t, script, outputLimit, nil)
}

// answeredRunWith is answeredRun for a job of the cgroup limits res.
func answeredRunWith(t *testing.T, script string, outputLimit int64, res *specs.LinuxResources) (answered, ran *Outcome) {
	t.Helper()
	h := &testCgroups{t: t, m: cgroupManager(t)}
	w := NewWarm(map[string]int{"sh": 1}, WarmOptions{Retry: time.Hour})
	t.Cleanup(w.Close)
	ready := `printf '\0\0\0\020{"type":"ready"}' > /pmjail/channel/out; read x < /pmjail/channel/in; `
	wj := warmShell(t, h, ready+script, 10*time.Second)
	w.Learn(wj)
	deadline := time.Now().Add(30 * time.Second)
	for w.Stats().Idle["sh"] < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("no warm runtime idle within 30s: %+v", w.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	exited := make(chan int, 1)
	var calls int
	spec := wj.Template.Spec
	if res != nil {
		cp := *spec
		linux := *spec.Linux
		linux.Resources = res
		cp.Linux = &linux
		spec = &cp
	}
	job := &Job{ID: "answer", Spec: spec, Files: wj.Template.Files, Timeout: 20 * time.Second, OutputLimit: outputLimit, Cgroups: h,
		Warm: w, WarmJob: wj, Exited: exited,
		Channel: func(context.Context, net.Conn) error { return errors.New("the run went cold") },
		WarmChannel: func(ctx context.Context, conn net.Conn) error {
			if _, err := conn.Write([]byte("go\n")); err != nil {
				return err
			}
			return ipc.Serve(ctx, conn, ipc.SessionConfig{ReadySeen: true, OnExit: func(code int) { exited <- code }}).ProtocolError
		},
		Answer: func(o *Outcome) {
			calls++
			cp := *o
			answered = &cp
		},
	}
	ran = Run(context.Background(), job)
	t.Cleanup(func() { _ = ran.Release() })
	if !ran.Warm {
		t.Fatalf("not run warm: %s", ran.WarmReason)
	}
	if calls > 1 {
		t.Fatalf("Answer called %d times", calls)
	}
	if ran.Observed != nil && ran.Observed.PID > 0 {
		if err := syscall.Kill(ran.Observed.PID, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("the runtime (pid %d) is still there after Run: %v", ran.Observed.PID, err)
		}
	}
	return answered, ran
}

// TestAnswerHoldsAllOutput: a warm run is answered once the guest said
// how it exits, and the answer holds every byte written before the exit
// frame, and of a writer that runs on beside it (a background loop) a
// whole-line prefix of what it wrote: nothing garbled, nothing missing in
// between. The outcome Run returns after the teardown is the one
// answered.
func TestAnswerHoldsAllOutput(t *testing.T) {
	testenv.RequireRoot(t)
	// The writer marks that it runs; the lines before the exit frame are
	// written once it does, beside it.
	script := `(: > /tmp/w; i=0; while :; do echo w$i; i=$((i+1)); done) & while [ ! -e /tmp/w ]; do :; done; ` +
		`i=0; while [ $i -lt 300 ]; do echo m$i; i=$((i+1)); done; ` + exitFrame(0) + `; read y < /pmjail/channel/in; wait`
	answered, ran := answeredRun(t, script, 64<<20)
	if answered == nil {
		t.Fatalf("no early answer; the run ended %s (%s)", ran.Status, ran.Message)
	}
	if answered.Status != StatusOK || answered.ExitCode != 0 || answered.Signal != "" {
		t.Fatalf("answered %s (%s), exit %d, signal %q; want ok, 0", answered.Status, answered.Message, answered.ExitCode, answered.Signal)
	}
	if ran.Stdout != answered.Stdout || ran.Status != answered.Status || ran.ExitCode != answered.ExitCode || ran.Wall != answered.Wall {
		t.Fatalf("the outcome changed after the answer: %s/%d/%s and %d bytes, answered %s/%d/%s and %d bytes",
			ran.Status, ran.ExitCode, ran.Wall, len(ran.Stdout), answered.Status, answered.ExitCode, answered.Wall, len(answered.Stdout))
	}
	out := answered.Stdout
	if !strings.HasSuffix(out, "\n") {
		t.Fatalf("the output ends in a cut line: %q", out[max(0, len(out)-40):])
	}
	nextM, nextW := 0, 0
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		switch line {
		case fmt.Sprintf("m%d", nextM):
			nextM++
		case fmt.Sprintf("w%d", nextW):
			nextW++
		default:
			t.Fatalf("line %q out of order or garbled (next m%d, w%d)", line, nextM, nextW)
		}
	}
	if nextM != 300 {
		t.Fatalf("%d of the 300 lines written before the exit frame answered", nextM)
	}
	if nextW == 0 {
		t.Fatalf("none of the writer's lines answered, though it ran before the exit frame")
	}
	t.Logf("answered with %d bytes: the 300 lines and %d of the writer's", len(out), nextW)
}

// TestAnswerKeepsTheLimit: output past the limit written just before the
// exit frame ends the run as output_limit, answered early or not.
func TestAnswerKeepsTheLimit(t *testing.T) {
	testenv.RequireRoot(t)
	script := `echo ` + strings.Repeat("x", 3000) + `; ` + exitFrame(0) + `; read y < /pmjail/channel/in`
	answered, ran := answeredRun(t, script, 1000)
	for _, o := range []*Outcome{answered, ran} {
		if o == nil {
			continue
		}
		if o.Status != StatusOutputLimit || len(o.Stdout) != 1000 || !o.Truncated.Stdout {
			t.Fatalf("status %s (%s), %d bytes, truncated %v; want output_limit with the 1000 bytes kept", o.Status, o.Message, len(o.Stdout), o.Truncated.Stdout)
		}
	}
}

// TestRunWarmTasksLimitIsTheGuests: a warm runtime's cgroup takes the
// job's bound on tasks plus pid 1's share, the init stage's own tasks in
// it (its one thread on cgroup v1; on v2 all of them, counted as the
// runtime started), and the outcome says that share: a job whose bound is
// below the init stage's threads still runs warm, and its bound is the
// guest's alone: under a bound of 2 the shell starts one subshell, and
// not a second.
func TestRunWarmTasksLimitIsTheGuests(t *testing.T) {
	testenv.RequireRoot(t)
	m := cgroupManager(t)
	testenv.Need(t, m.Host().Has(cgroup.Pids), "the pids controller")
	limit := int64(2)
	_, ran := answeredRunWith(t, `(while :; do :; done) & echo one; (while :; do :; done) & echo two; `+exitFrame(0)+`; read y < /pmjail/channel/in`,
		1<<20, &specs.LinuxResources{Pids: &specs.LinuxPids{Limit: &limit}})
	if ran.Status != StatusError || ran.Stdout != "one\n" || !strings.Contains(strings.ToLower(ran.Stderr), "fork") {
		t.Fatalf("status %s (%s) stdout %q stderr %q; want the guest's 2 tasks and the third refused", ran.Status, ran.Message, ran.Stdout, ran.Stderr)
	}
	v2 := m.Host().Mode == cgroup.V2
	if ran.InitTasks == 0 || !v2 && ran.InitTasks != initThread {
		t.Errorf("cgroup v2 %v: pid 1's share of the tasks is %d, want %d on v1 and its count on v2", v2, ran.InitTasks, initThread)
	}
	dir := adopted(ran).Paths()[cgroup.Pids]
	if dir == "" {
		dir = adopted(ran).Paths()[cgroup.UnifiedKey]
	}
	data, err := os.ReadFile(filepath.Join(dir, "pids.max"))
	if want := strconv.FormatInt(limit+int64(ran.InitTasks), 10); err != nil || strings.TrimSpace(string(data)) != want {
		t.Errorf("pids.max %q (%v), want the job's %d and pid 1's %d", data, err, limit, ran.InitTasks)
	}
}
