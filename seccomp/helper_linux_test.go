package seccomp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/seccomp/bpf"
	"golang.org/x/sys/unix"
)

// The tests install filters in throwaway children: the test binary re-execs
// itself with childRoleEnv naming a role. The program arrives on fd 3 (a
// socketpair), never in env or argv; with Notify the child sends the
// listener fd back on the same socket.
const childRoleEnv = "PMJAIL_SECCOMP_TEST_CHILD"

func TestMain(m *testing.M) {
	if role := os.Getenv(childRoleEnv); role != "" {
		os.Exit(childMain(role))
	}
	os.Exit(m.Run())
}

// childMain runs in the re-exec'd child: lock the thread, no_new_privs,
// read and install the program, then run the role.
func childMain(role string) int {
	runtime.LockOSThread()
	conn := os.NewFile(3, "control")
	var n uint32
	if err := binary.Read(conn, binary.NativeEndian, &n); err != nil {
		fmt.Fprintln(os.Stderr, "read program length:", err)
		return 2
	}
	buf := make([]byte, n)
	if _, err := io.ReadFull(conn, buf); err != nil {
		fmt.Fprintln(os.Stderr, "read program:", err)
		return 2
	}
	var p bpf.Program
	if err := p.UnmarshalBinary(buf); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no_new_privs:", err)
		return 2
	}
	start := time.Now()
	fd, err := bpf.Install(&p)
	installed := time.Since(start)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	if fd >= 0 {
		// As pmjail's init stage does: pass the listener, then drop it.
		if err := unix.Sendmsg(3, []byte{0}, unix.UnixRights(fd), nil, 0); err != nil {
			fmt.Fprintln(os.Stderr, "send listener:", err)
			return 2
		}
		unix.Close(fd)
	}
	switch role {
	case "install":
		fmt.Println("install_ns", installed.Nanoseconds())
		return 0
	case "probe":
		probeAll(os.Stdout)
		return 0
	case "exec":
		args := os.Args[len(os.Args)-countExecArgs():]
		err := unix.Exec(args[0], args, os.Environ())
		fmt.Fprintln(os.Stderr, "exec:", err)
		return 127
	}
	fmt.Fprintln(os.Stderr, "unknown role", role)
	return 2
}

// countExecArgs finds the command after the "--" in the child's argv.
func countExecArgs() int {
	for i, a := range os.Args {
		if a == "--" {
			return len(os.Args) - i - 1
		}
	}
	return 0
}

type child struct {
	cmd      *exec.Cmd
	listener int // -1 unless the program asked for notification
	stdout   strings.Builder
	stderr   strings.Builder
}

// startChild re-execs the test binary in role with prog installed; args
// after "--" are the command for the "exec" role.
func startChild(t testing.TB, ctx context.Context, role string, prog *bpf.Program, env []string, args ...string) *child {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(os.NewSyscallError("socketpair", err))
	}
	parent := os.NewFile(uintptr(fds[0]), "control-parent")
	childEnd := os.NewFile(uintptr(fds[1]), "control-child")
	defer childEnd.Close()
	t.Cleanup(func() { parent.Close() })

	argv := append([]string{"-test.run=^$", "--"}, args...)
	c := &child{listener: -1}
	c.cmd = exec.CommandContext(ctx, os.Args[0], argv...)
	c.cmd.Env = append(append(os.Environ(), childRoleEnv+"="+role), env...)
	c.cmd.ExtraFiles = []*os.File{childEnd}
	c.cmd.Stdout, c.cmd.Stderr = &c.stdout, &c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			_ = c.cmd.Process.Kill()
			_ = c.cmd.Wait()
		}
	})
	b, err := prog.MarshalBinary()
	if err != nil {
		t.Fatal(err)
	}
	if err := binary.Write(parent, binary.NativeEndian, uint32(len(b))); err != nil {
		t.Fatal(err)
	}
	if _, err := parent.Write(b); err != nil {
		t.Fatal(err)
	}
	if prog.Notify {
		c.listener = recvFD(t, fds[0])
	}
	return c
}

func recvFD(t testing.TB, sock int) int {
	t.Helper()
	buf, oob := make([]byte, 1), make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, buf, oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		t.Fatal(os.NewSyscallError("recvmsg", err))
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("no listener fd from the child: %v", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("no listener fd from the child: %v", err)
	}
	return fds[0]
}

// wait waits for the child and parses "name result" lines from its stdout.
func (c *child) wait(t testing.TB) map[string]string {
	t.Helper()
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("child: %v\nstdout:\n%s\nstderr:\n%s", err, c.stdout.String(), c.stderr.String())
	}
	res := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(c.stdout.String()))
	for sc.Scan() {
		if name, val, ok := strings.Cut(sc.Text(), " "); ok {
			res[name] = val
		}
	}
	return res
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
