package runtimes

// A stand-in for the jail while package jail is being written: it runs a
// Launch under bubblewrap in a root assembled the same way (the program, the
// binds and the files read-only, a fresh /tmp, /dev and /proc, no network,
// cwd /, fd 3 the channel) and speaks the channel protocol on the host's
// end. Tests through it move to the real jail once that lands.

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// requireHost skips a test whose host lacks a feature, and fails it instead
// when CI=true: CI hosts must have every feature the suite needs.
func requireHost(t testing.TB, ok bool, feature string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("host lacks %s (CI=true: a skip is a failure)", feature)
	}
	t.Skipf("host lacks %s", feature)
}

// frame is one decoded channel frame, either direction.
type frame struct {
	Type   string          `json:"type"`
	ID     int64           `json:"id,omitempty"`
	Method string          `json:"method,omitempty"`
	Params json.RawMessage `json:"params,omitempty"`
	Value  json.RawMessage `json:"value,omitempty"`
	Error  *struct {
		Name    string `json:"name"`
		Message string `json:"message"`
		Stack   string `json:"stack"`
	} `json:"error,omitempty"`
}

// runResult is what one emulated run produced.
type runResult struct {
	Stdout, Stderr string
	Exit           int
	Calls          []frame
	Final          *frame // the done or error frame, if any
	Wall           time.Duration
	MaxThreads     int   // the most threads one process of the run had
	MaxRSSKiB      int64 // the highest VmHWM (peak RSS) one process reached
}

// sampleProcs polls the thread counts and peak RSS of root's descendants
// every 10 ms until stopped, keeping the highest in res.
func sampleProcs(root int, res *runResult) (stop func()) {
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for {
			for _, pid := range descendants(root) {
				data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
				if err != nil {
					continue
				}
				for _, line := range strings.Split(string(data), "\n") {
					if n, ok := strings.CutPrefix(line, "Threads:"); ok {
						if v, err := strconv.Atoi(strings.TrimSpace(n)); err == nil && v > res.MaxThreads {
							res.MaxThreads = v
						}
					}
					if n, ok := strings.CutPrefix(line, "VmHWM:"); ok {
						n = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(n), "kB"))
						if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > res.MaxRSSKiB {
							res.MaxRSSKiB = v
						}
					}
				}
			}
			select {
			case <-done:
				return
			case <-tick.C:
			}
		}
	}()
	var once sync.Once
	return func() { once.Do(func() { close(done); <-finished }) }
}

// descendants lists root and every process below it.
func descendants(root int) []int {
	out := []int{root}
	for i := 0; i < len(out); i++ {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", out[i], out[i]))
		if err != nil {
			continue
		}
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil {
				out = append(out, pid)
			}
		}
	}
	return out
}

// replier answers a guest's call: ok with value, or not ok with code.
type replier func(method string, params json.RawMessage) (value any, code string)

func echoReplier(method string, params json.RawMessage) (any, string) {
	switch {
	case strings.HasPrefix(method, "log."):
		return nil, ""
	case method == "request.send":
		return map[string]any{"status": 200, "headers": map[string]string{}, "body": "echo:" + string(params)}, ""
	}
	return nil, "unsupported"
}

func writeFrame(w io.Writer, v any) error {
	body, err := json.Marshal(v)
	if err != nil {
		return err
	}
	head := make([]byte, 4)
	binary.BigEndian.PutUint32(head, uint32(len(body)))
	_, err = w.Write(append(head, body...))
	return err
}

func readFrame(r io.Reader) (*frame, error) {
	head := make([]byte, 4)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(head)
	if n == 0 || n > 4<<20 {
		return nil, errors.New("bad frame length")
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return nil, err
	}
	var f frame
	if err := json.Unmarshal(body, &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// bwrapArgs assembles the emulated root for l; files are written under dir.
func bwrapArgs(t testing.TB, l *Launch, dir string) []string {
	t.Helper()
	args := []string{"--unshare-all", "--die-with-parent", "--new-session",
		"--ro-bind", l.Program, l.Target,
		"--ro-bind", "/lib", "/lib", "--ro-bind", "/usr/lib", "/usr/lib",
	}
	if _, err := os.Stat("/lib64"); err == nil {
		args = append(args, "--ro-bind", "/lib64", "/lib64")
	}
	for _, b := range l.Binds {
		args = append(args, "--ro-bind", b.Source, b.Target)
	}
	tops := map[string]bool{}
	for _, f := range l.Files {
		host := filepath.Join(dir, f.Path)
		if err := os.MkdirAll(filepath.Dir(host), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(host, f.Data, f.Mode); err != nil {
			t.Fatal(err)
		}
		tops["/"+strings.Split(strings.TrimPrefix(f.Path, "/"), "/")[0]] = true
	}
	for top := range tops {
		args = append(args, "--ro-bind", filepath.Join(dir, top), top)
	}
	args = append(args, "--tmpfs", "/tmp", "--dev", "/dev", "--proc", "/proc", "--chdir", "/", "--")
	return append(args, l.Args...)
}

// runBwrap runs l under bubblewrap with input as the start frame's input.
func runBwrap(t testing.TB, l *Launch, input any, reply replier) *runResult {
	t.Helper()
	return runBwrapOuter(t, l, input, reply, nil)
}

// runBwrapOuter is runBwrap with bwrap itself run by outer (a measuring
// tool such as /usr/bin/time -v).
func runBwrapOuter(t testing.TB, l *Launch, input any, reply replier, outer []string) *runResult {
	t.Helper()
	bwrap, err := exec.LookPath("bwrap")
	requireHost(t, err == nil, "bubblewrap (bwrap), the jail's stand-in")
	if reply == nil {
		reply = echoReplier
	}
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(os.NewSyscallError("socketpair", err))
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "channel-host")
	guestEnd := os.NewFile(uintptr(fds[1]), "channel-guest")
	defer hostEnd.Close()

	argv := append(append(outer[:len(outer):len(outer)], bwrap), bwrapArgs(t, l, t.TempDir())...)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = l.Env
	cmd.Stdin = nil
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.ExtraFiles = []*os.File{guestEnd}
	begin := time.Now()
	if err := cmd.Start(); err != nil {
		guestEnd.Close()
		t.Fatal(err)
	}
	guestEnd.Close()
	killer := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer killer.Stop()
	res := &runResult{}
	stopSampling := sampleProcs(cmd.Process.Pid, res)
	defer stopSampling()

	if err := writeFrame(hostEnd, map[string]any{"type": "start", "input": input, "capabilities": []string{}, "options": map[string]string{"timing": "precise"}}); err != nil {
		t.Fatalf("send start: %v", err)
	}
	for {
		f, err := readFrame(hostEnd)
		if err != nil {
			break
		}
		switch f.Type {
		case "call":
			res.Calls = append(res.Calls, *f)
			value, code := reply(f.Method, f.Params)
			out := map[string]any{"type": "reply", "id": f.ID, "ok": code == ""}
			if code == "" {
				out["value"] = value
			} else {
				out["error"] = map[string]string{"code": code, "message": "test reply " + code}
			}
			if err := writeFrame(hostEnd, out); err != nil {
				t.Fatalf("send reply: %v", err)
			}
		case "done", "error":
			if res.Final != nil {
				t.Errorf("second final frame %+v", f)
			}
			res.Final = f
		default:
			t.Errorf("unexpected frame %+v", f)
		}
	}
	err = cmd.Wait()
	stopSampling()
	res.Wall = time.Since(begin)
	res.Stdout, res.Stderr = stdout.String(), stderr.String()
	var exitErr *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exitErr):
		res.Exit = exitErr.ExitCode()
	default:
		t.Fatalf("wait: %v", err)
	}
	return res
}
