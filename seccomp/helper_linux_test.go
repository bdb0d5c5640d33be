package seccomp_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/seccomp"
	"github.com/pmjail/pmjail/seccomp/bpf"
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

func builtin(t *testing.T, name string) *specs.LinuxSeccomp {
	t.Helper()
	p, err := profiles.Seccomp(name)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// probeProfile is the deno profile plus wait4 (so a probe's clone can reap
// its child) and any extra allowed names.
func probeProfile(t *testing.T, extra ...string) *specs.LinuxSeccomp {
	p := builtin(t, "deno")
	p.Syscalls = append(p.Syscalls, specs.LinuxSyscall{Names: append([]string{"wait4"}, extra...), Action: specs.ActAllow})
	return p
}

func compile(t *testing.T, p *specs.LinuxSeccomp, opt seccomp.Options) *bpf.Program {
	t.Helper()
	prog, err := seccomp.Compile(p, opt)
	testenv.Need(t, !errors.Is(err, seccomp.ErrNoCompiler), "a seccomp compiler (cgo)")
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// runProbes runs the named probes in a child under prog and returns each
// probe's result ("ok" or an errno name); with Notify it also serves the
// listener and returns the denial counts.
func runProbes(t *testing.T, prog *bpf.Program, names ...string) (map[string]string, map[string]uint64) {
	t.Helper()
	ctx := testContext(t)
	c := startChild(t, ctx, "probe", prog, nil, names...)
	var counts map[string]uint64
	var wg sync.WaitGroup
	if c.listener >= 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			counts = seccomp.Serve(ctx, c.listener).Counts()
		}()
	}
	res := c.wait(t)
	wg.Wait() // Serve returns when the child is gone (listener hangs up)
	return res, counts
}
