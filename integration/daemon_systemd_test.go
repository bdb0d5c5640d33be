package integration

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The daemon as systemd runs it: the listening socket handed over as fd 3
// (socket activation, LISTEN_FDS/LISTEN_PID), and READY=1, WATCHDOG=1 and
// STOPPING=1 sent to $NOTIFY_SOCKET.
func TestDaemonUnderSystemdProtocol(t *testing.T) {
	dir := daemonDir(t)
	sockPath := filepath.Join(dir, "activated.sock")
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	lnFile, err := ln.File()
	if err != nil {
		t.Fatal(err)
	}
	defer lnFile.Close()

	notifyPath := filepath.Join(dir, "notify.sock")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer notify.Close()
	states := make(chan string, 64)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, _, err := notify.ReadFromUnix(buf)
			if err != nil {
				close(states)
				return
			}
			for _, s := range strings.Split(string(buf[:n]), "\n") {
				if s != "" {
					states <- s
				}
			}
		}
	}()

	cfgPath := filepath.Join(dir, "config.json")
	writeFile(t, cfgPath, `{"version": 1}`)
	// systemd sets LISTEN_PID to the service's own pid: exec keeps it.
	cmd := exec.Command("/bin/sh", "-c", `LISTEN_PID=$$ exec "$@"`, "sh", pmjail, "serve", "--config", cfgPath)
	cmd.Env = append(os.Environ(), "LISTEN_FDS=1", "NOTIFY_SOCKET="+notifyPath, "WATCHDOG_USEC=400000")
	cmd.ExtraFiles = []*os.File{lnFile}
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	defer func() {
		_ = cmd.Process.Kill()
		<-done
	}()

	waitFor := func(want string) {
		t.Helper()
		deadline := time.After(30 * time.Second)
		for {
			select {
			case s := <-states:
				if s == want {
					return
				}
			case <-deadline:
				t.Fatalf("no %s from the daemon within 30s; log:\n%s", want, logs.String())
			}
		}
	}
	waitFor("READY=1")
	// The activated socket (not --socket) serves the API.
	c := checked(t, sockPath)
	defer c.Close()
	if _, err := c.Health(context.Background()); err != nil {
		t.Fatalf("health over the activated socket: %v\n%s", err, logs.String())
	}
	if !strings.Contains(logs.String(), `"socket_activated":true`) {
		t.Errorf("the daemon did not log socket activation:\n%s", logs.String())
	}
	waitFor("WATCHDOG=1")
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	waitFor("STOPPING=1")
	select {
	case <-done:
		if code := cmd.ProcessState.ExitCode(); code != 0 {
			t.Fatalf("exit %d after SIGTERM:\n%s", code, logs.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("the daemon did not stop after SIGTERM:\n%s", logs.String())
	}
}
