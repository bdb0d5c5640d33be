//go:build cgo

package spawn

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/proctest"
	"github.com/pmjail/pmjail/internal/testenv"
)

// TestSpawnSharedCrossedFds: fds whose numbers are other slots' targets
// land where they were asked to (parent crosses 3 and 4 over).
func TestSpawnSharedCrossedFds(t *testing.T) {
	testenv.RequireRoot(t)
	dir := t.TempDir()
	a, err := os.Create(filepath.Join(dir, "a"))
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := os.Create(filepath.Join(dir, "b"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	parent := exec.Command(exe, parentRole)
	parent.ExtraFiles = []*os.File{a, b} // its 3 and 4
	if out, err := parent.CombinedOutput(); err != nil {
		t.Fatalf("spawn parent: %v: %s", err, out)
	}
	// The probe's stdout was the parent's 3: file a.
	r := readProbe(t, a)
	want := [5]string{fdIdentityOf(t, os.DevNull), fdIdentityOf(t, a.Name()), r.Fds[2],
		fdIdentityOf(t, b.Name()), fdIdentityOf(t, a.Name())}
	if r.Fds != want {
		t.Errorf("child fds 0..4 %v, want %v", r.Fds, want)
	}
}

// TestSpawnSharedStatusPipeAmongSlots: a status pipe that got one of the
// child's fd numbers still reports the child's failure (lowFDs).
func TestSpawnSharedStatusPipeAmongSlots(t *testing.T) {
	testenv.RequireRoot(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(exe, lowFDsRole).CombinedOutput(); err != nil {
		t.Fatalf("%v (2: setting up its fds failed; 4: it started a missing program; 5: another error): %s", err, out)
	}
}

// TestSpawnSharedConcurrent: two starts that both clone before either
// writes its id maps (each child then holds a copy of the other's pipe
// ends), and whose maps both fail, end; so do a good start and a bad one
// side by side. No child is left.
func TestSpawnSharedConcurrent(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name string
		bad  [2]bool
	}{{"both fail", [2]bool{true, true}}, {"one fails", [2]bool{false, true}}} {
		t.Run(tc.name, func(t *testing.T) {
			// Both starts make their pipes, then both clone, then both go on.
			var piped, cloned sync.WaitGroup
			piped.Add(2)
			cloned.Add(2)
			testHook = func(stage string) {
				at := map[string]*sync.WaitGroup{"pipes": &piped, "cloned": &cloned}[stage]
				at.Done()
				at.Wait()
			}
			defer func() { testHook = nil }()
			errs := make(chan error, 2)
			for _, bad := range tc.bad {
				cmd, _, _ := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID)
				if bad {
					attr := cmd.SysProcAttr
					attr.UidMappings = append(attr.UidMappings, attr.UidMappings[0])
				}
				go func() { errs <- startOutcome(cmd, bad) }()
			}
			timeout := time.After(20 * time.Second)
			for range 2 {
				select {
				case err := <-errs:
					if err != nil {
						t.Error(err)
					}
				case <-timeout:
					t.Fatal("starts still blocked after 20s")
				}
			}
			if pids := proctest.Children(t); len(pids) != 0 {
				t.Errorf("children left: %v", pids)
			}
		})
	}
}

// startOutcome starts cmd and says what went other than expected: a
// failed start if bad, a probe that exits 0 otherwise.
func startOutcome(cmd *exec.Cmd, bad bool) error {
	proc, err := startShared(cmd)
	switch {
	case bad && err == nil:
		proc.Kill()
		proc.Wait()
		return errors.New("started with a broken id map")
	case bad:
		return nil
	case err != nil:
		return err
	}
	st, err := proc.Wait()
	if err == nil && !st.Success() {
		err = fmt.Errorf("probe: %v", st)
	}
	return err
}

// TestSpawnSharedFailures: a child that cannot start is reaped, its error
// says which step failed, and nothing of it stays open.
func TestSpawnSharedFailures(t *testing.T) {
	testenv.RequireRoot(t)
	for _, tc := range []struct {
		name    string
		breakIt func(*exec.Cmd)
		want    string
	}{
		{"missing program", func(c *exec.Cmd) { c.Path = "/nonexistent/pmjail-init" }, "exec: no such file or directory"},
		{"bad id mapping", func(c *exec.Cmd) {
			c.SysProcAttr.UidMappings = append(c.SysProcAttr.UidMappings, c.SysProcAttr.UidMappings[0])
		}, "write uid_map of the init stage"},
		{"unmapped uid", func(c *exec.Cmd) { c.SysProcAttr.Credential.Uid = 4242 }, "setresuid: invalid argument"},
		{"unsupported attribute", func(c *exec.Cmd) { c.SysProcAttr.Setpgid = true }, "unsupported"},
		{"shared fd table", func(c *exec.Cmd) { c.SysProcAttr.Cloneflags |= unix.CLONE_FILES }, "unsupported"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd, _, _ := probeCmd(t, unix.CLONE_NEWUSER|unix.CLONE_NEWPID)
			tc.breakIt(cmd)
			before := proctest.FDTargets(t)
			proc, err := startShared(cmd)
			if err == nil {
				proc.Kill()
				proc.Wait()
				t.Fatal("started")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q, want it to contain %q", err, tc.want)
			}
			// The child is reaped (other tests' children are not touched).
			if pids := proctest.Children(t); len(pids) != 0 {
				t.Errorf("children left: %v", pids)
			}
			if opened := newFds(t, before); len(opened) != 0 {
				t.Errorf("fds left open: %v", opened)
			}
			if dumpable(t) != wasDumpable() {
				t.Errorf("this process's dumpability changed (was %v) after the child failed", wasDumpable())
			}
		})
	}
}

// BenchmarkStartInitStage starts and reaps a child in new user, pid and
// mount namespaces from a process holding a daemon-sized heap, through
// startShared and through Go's start.
func BenchmarkStartInitStage(b *testing.B) {
	testenv.RequireRoot(b)
	// A resident heap the size of an idle daemon's (~15 MiB): what a fork
	// copies.
	ballast := make([]byte, 16<<20)
	for i := 0; i < len(ballast); i += 4096 {
		ballast[i] = 1
	}
	defer runtime.KeepAlive(ballast)
	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS)
	for _, bc := range []struct {
		name  string
		start func(*exec.Cmd) (*os.Process, error)
	}{
		{"shared", startShared},
		{"go", func(c *exec.Cmd) (*os.Process, error) {
			err := startLocked(c)
			return c.Process, err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				cmd := &exec.Cmd{Path: "/bin/true", Args: []string{"true"}, Dir: "/",
					Stdin: os.Stdin, Stdout: os.Stderr, Stderr: os.Stderr, SysProcAttr: testAttr(flags)}
				proc, err := bc.start(cmd)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := proc.Wait(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// childFuncs are the C functions the shared start's child may run: the
// child and the helpers of its own file (GCC may keep them out of line,
// under a suffixed name such as pj_fail.isra.0).
var childFuncs = map[string]bool{"pj_child": true, "pj_fail": true, "pj_sys6": true}

// objdumpTarget is the symbol a direct call or jump goes to, as objdump
// prints it: "call 4011d0 <pj_fail.isra.0>".
var objdumpTarget = regexp.MustCompile(`^[0-9a-f]+ <([^>+]+)(\+0x[0-9a-f]+)?>$`)

// TestSpawnChildMakesNoCalls: the shared start's child runs on the
// supervisor's memory while the supervisor's threads run on, so it may call
// nothing that takes a lock or sets errno: it makes raw system calls only.
// Its machine code in this very binary, and that of every function it
// reaches, holds no call and no jump but to childFuncs, none indirect.
func TestSpawnChildMakesNoCalls(t *testing.T) {
	objdump, err := exec.LookPath("objdump")
	if err != nil {
		testenv.SkipOrFail(t, "host lacks objdump (binutils)")
	}
	exe := symbolicBinary(t)
	seen := map[string]bool{"pj_child": true}
	for queue := []string{"pj_child"}; len(queue) > 0; queue = queue[1:] {
		fn := queue[0]
		out, err := exec.Command(objdump, "-d", "--no-show-raw-insn", "--disassemble="+fn, exe).Output()
		if err != nil {
			t.Fatalf("objdump %s: %v", fn, err)
		}
		insns := 0
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			// "  7dee80:\tcall   7dee00 <pj_fail>"
			addr, insn, ok := strings.Cut(sc.Text(), ":\t")
			if !ok || strings.TrimSpace(addr) == "" || strings.Contains(addr, "<") {
				continue
			}
			insns++
			fields := strings.Fields(insn)
			for len(fields) > 1 && (fields[0] == "notrack" || fields[0] == "bnd") {
				fields = fields[1:]
			}
			op := fields[0]
			if !strings.HasPrefix(op, "call") && !strings.HasPrefix(op, "j") {
				continue
			}
			m := objdumpTarget.FindStringSubmatch(strings.Join(fields[1:], " "))
			if m == nil {
				t.Errorf("%s: indirect %s: %s", fn, op, insn)
				continue
			}
			target := m[1]
			if target == fn && !strings.HasPrefix(op, "call") {
				continue // a branch within the function
			}
			base, _, _ := strings.Cut(target, ".")
			if !childFuncs[base] {
				t.Errorf("%s: %s to %s, which is not the child's own code: %s", fn, op, target, insn)
				continue
			}
			if !seen[target] {
				seen[target] = true
				queue = append(queue, target)
			}
		}
		if insns == 0 {
			t.Fatalf("objdump found no code of %s in %s", fn, exe)
		}
	}
}

// symbolicBinary is a binary of this package's tests that has its symbol
// table: this one, if it was built with go test -c, else (go test strips
// the binaries it runs) one built so from the same source, by the same
// toolchain and with the same cgo flags.
func symbolicBinary(t *testing.T) string {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Symbols()
	f.Close()
	if err == nil {
		return exe
	}
	if !errors.Is(err, elf.ErrNoSymbols) {
		t.Fatalf("symbols of %s: %v", exe, err)
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		testenv.SkipOrFail(t, "a test binary without symbols, and no go tool to build one with")
	}
	exe = filepath.Join(t.TempDir(), "spawn.test")
	// The test runs in this package's source directory.
	if out, err := exec.Command(goTool, "test", "-c", "-o", exe, ".").CombinedOutput(); err != nil {
		t.Fatalf("go test -c: %v: %s", err, out)
	}
	return exe
}
