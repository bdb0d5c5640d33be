package integration

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail"
)

// TestOneBinary builds pmjail as `go install ./cmd/pmjail` does (no tags,
// no -ldflags) into a directory that holds nothing else, and runs each of
// its commands: with no pmjail-init or pmjail-serve beside it, it must be
// its own init stage and its own daemon, and warm its caches in its own
// jail (prepare, in a fresh state directory).
func TestOneBinary(t *testing.T) {
	testenv.RequireRoot(t)
	goTool, err := exec.LookPath("go")
	testenv.Need(t, err == nil, "the go command, to build pmjail alone")
	dir := daemonDir(t) // searchable by the jail's ids: pmjail is its own init stage
	bin := filepath.Join(dir, "pmjail")
	build := exec.Command(goTool, "build", "-o", bin, "./cmd/pmjail")
	build.Dir = repoRoot
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build ./cmd/pmjail: %v\n%s", err, out)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("%s holds %v, want pmjail alone", dir, entries)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	state := filepath.Join(dir, "state")
	pm := func(t *testing.T, args ...string) (string, error) {
		t.Helper()
		cmd := exec.CommandContext(ctx, bin, args...)
		cmd.Env = append(os.Environ(), "PMJAIL_STATE_DIR="+state)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	t.Run("version", func(t *testing.T) {
		out, err := pm(t, "version")
		if err != nil || !strings.Contains(out, "init stage: this binary") || !strings.Contains(out, "daemon: this binary") {
			t.Errorf("version: %v\n%s", err, out)
		}
	})
	t.Run("posture", func(t *testing.T) {
		out, err := pm(t, "posture", "--json")
		var p map[string]any
		if err != nil || json.Unmarshal([]byte(out), &p) != nil || len(p) == 0 {
			t.Errorf("posture --json: %v\n%s", err, out)
		}
	})
	t.Run("exec", func(t *testing.T) {
		out, err := pm(t, "exec", "--", "/bin/echo", "hello from exec")
		if err != nil || out != "hello from exec\n" {
			t.Errorf("exec: %v\n%s", err, out)
		}
	})
	t.Run("prepare", func(t *testing.T) {
		// The caches are warmed in the binary's own jail: "none" would
		// say the warm run failed.
		out, err := pm(t, "prepare")
		if err != nil || !strings.Contains(out, "deno code cache: "+state) || !strings.Contains(out, "deno guest cache: "+state) {
			t.Errorf("prepare: %v\n%s", err, out)
		}
	})
	t.Run("run", func(t *testing.T) {
		src := filepath.Join(dir, "hello.js")
		writeFile(t, src, `console.log("hello from run");`)
		out, err := pm(t, "run", src)
		if err != nil || out != "hello from run\n" {
			t.Errorf("run: %v\n%s", err, out)
		}
	})
	t.Run("serve", func(t *testing.T) {
		sock := filepath.Join(dir, "pmjail.sock")
		cmd := exec.Command(bin, "serve", "--socket", sock)
		cmd.Env = append(os.Environ(), "PMJAIL_STATE_DIR="+state)
		logs, err := cmd.StderrPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		logged := &lockedBuffer{}
		serving := make(chan struct{})
		go func() {
			// The daemon logs "serving" once it listens; the rest of its
			// log is kept for the failure messages.
			sc := bufio.NewScanner(logs)
			ready := false
			for sc.Scan() {
				fmt.Fprintln(logged, sc.Text())
				if !ready && strings.Contains(sc.Text(), `"msg":"serving"`) {
					close(serving)
					ready = true
				}
			}
			_, _ = io.Copy(io.Discard, logs)
			exited <- cmd.Wait()
		}()
		stopped := false
		defer func() {
			if !stopped {
				_ = cmd.Process.Kill()
				<-exited
			}
		}()
		select {
		case <-serving:
		case err := <-exited:
			stopped = true
			t.Fatalf("pmjail serve exited before serving: %v\n%s", err, logged)
		case <-ctx.Done():
			t.Fatalf("pmjail serve did not serve: %s", logged)
		}
		c := checked(t, sock)
		defer c.Close()
		if h, err := c.Health(ctx); err != nil || h.PID != cmd.Process.Pid {
			t.Errorf("health %+v, %v: want the daemon in pmjail's own process %d", h, err, cmd.Process.Pid)
		}
		res, err := c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("hello from serve")`})
		if err != nil || res.Status != jail.StatusOK || res.Stdout != "hello from serve\n" {
			t.Errorf("run through the daemon: %+v, %v", res, err)
		}
		if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-exited:
			stopped = true
			if err != nil || !strings.Contains(logged.String(), `"msg":"stopped"`) {
				t.Errorf("pmjail serve after SIGTERM: %v\n%s", err, logged)
			}
		case <-ctx.Done():
			t.Fatalf("pmjail serve did not stop after SIGTERM: %s", logged)
		}
	})
}
