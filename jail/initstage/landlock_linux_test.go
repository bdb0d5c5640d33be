package initstage

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/landlock-lsm/go-landlock/landlock"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
)

// The rights applyLandlock grants are those of go-landlock's own rules.
func TestLandlockRightsMatchLibrary(t *testing.T) {
	for _, c := range []struct {
		rule   landlock.FSRule
		access uint64
	}{
		{landlock.RODirs("/x"), llRead},
		{landlock.RWDirs("/x"), llReadWrite},
		{landlock.RWDirs("/x").WithRefer(), llRWDirs},
		{landlock.RWFiles("/x"), llRWFiles},
	} {
		if want := fmt.Sprintf("REQUIRE %v for paths [/x]", landlock.AccessFSSet(c.access)); c.rule.String() != want {
			t.Errorf("library rule %s, applyLandlock's %s", c.rule, want)
		}
	}
	// V11 is the newest configuration the library has, and the last here.
	if landlockABIs[len(landlockABIs)-1] != landlock.V11 {
		t.Errorf("landlockABIs ends with %v, want V11", landlockABIs[len(landlockABIs)-1])
	}
}

const landlockStageEnv = "PMJAIL_TEST_LANDLOCK_STAGE"

// TestLandlockOnExecThread enforces applyLandlock's ruleset as the init
// stage does, on a locked thread of a multi-threaded Go process that then
// execs, and attacks it from the exec'd program: the domain must hold for
// everything after the exec, although the other threads never got it.
// Every target is the test's own (its directory, listeners, process).
func TestLandlockOnExecThread(t *testing.T) {
	switch os.Getenv(landlockStageEnv) {
	case "restrict":
		landlockRestrictAndExec()
	case "probe":
		landlockProbe()
	}
	if _, err := landlockABI(); err != nil {
		testenv.SkipOrFail(t, "no Landlock here: %v", err)
	}
	dir := t.TempDir()
	rw, ro, rwFile := filepath.Join(dir, "rw"), filepath.Join(dir, "ro"), filepath.Join(dir, "rwfile")
	for _, d := range []string{rw, ro} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{rwFile, filepath.Join(ro, "f")} {
		if err := os.WriteFile(f, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tcp.Close()
	abstract := fmt.Sprintf("@pmjail-landlock-test-%d", os.Getpid())
	ul, err := net.Listen("unix", abstract)
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestLandlockOnExecThread$")
	cmd.Env = append(os.Environ(), landlockStageEnv+"=restrict", "LL_DIR="+dir,
		"LL_TCP="+strconv.Itoa(tcp.Addr().(*net.TCPAddr).Port), "LL_ABSTRACT="+abstract)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("probe: %v\n%s", err, out)
	}
	var rep struct {
		ABI    int
		Reason string
		Probes map[string]string
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if line, ok := strings.CutPrefix(sc.Text(), "LANDLOCK-PROBES "); ok {
			if err := json.Unmarshal([]byte(line), &rep); err != nil {
				t.Fatal(err)
			}
		}
	}
	if rep.ABI < 1 {
		t.Fatalf("no Landlock enforced: %q (output %q)", rep.Reason, out)
	}
	want := map[string]string{
		"read ro/f": "ok", "write ro/f": "EACCES", "create ro/new": "EACCES", "mkdir ro/d": "EACCES",
		"create rw/new": "ok", "mkdir rw/d": "ok", "write rwfile": "ok", "write dir/rwfile-new": "EACCES",
		"no_new_privs": "1",
	}
	if rep.ABI >= 4 {
		want["tcp connect"], want["tcp bind"] = "EACCES", "EACCES"
	}
	if rep.ABI >= 6 {
		want["abstract connect"], want["signal parent"] = "EPERM", "EPERM"
	}
	for k, v := range want {
		if rep.Probes[k] != v {
			t.Errorf("ABI %d: %s: %q, want %q", rep.ABI, k, rep.Probes[k], v)
		}
	}
}

// landlockRestrictAndExec is the init stage's part: restrict this thread
// and exec the probe from it.
func landlockRestrictAndExec() {
	runtime.LockOSThread()
	dir := os.Getenv("LL_DIR")
	abi, reason := applyLandlock([]specs.Mount{
		{Destination: filepath.Join(dir, "rw"), Type: "tmpfs"},
		{Destination: filepath.Join(dir, "ro"), Type: "bind", Options: []string{"ro"}},
		{Destination: "/proc", Type: "proc"},
	}, []string{filepath.Join(dir, "rwfile")})
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, landlockStageEnv+"=") {
			env = append(env, kv)
		}
	}
	env = append(env, landlockStageEnv+"=probe", "LL_ABI="+strconv.Itoa(abi), "LL_REASON="+reason)
	err := unix.Exec(os.Args[0], os.Args, env)
	fmt.Fprintln(os.Stderr, "exec:", err)
	os.Exit(2)
}

func landlockProbe() {
	dir := os.Getenv("LL_DIR")
	p := map[string]string{}
	res := func(err error) string {
		var en syscall.Errno
		switch {
		case err == nil:
			return "ok"
		case errors.As(err, &en):
			return unix.ErrnoName(en)
		}
		return err.Error()
	}
	open := func(name string, flags int) string {
		fd, err := unix.Open(filepath.Join(dir, name), flags|unix.O_CLOEXEC, 0o644)
		if err == nil {
			unix.Close(fd)
		}
		return res(err)
	}
	p["read ro/f"] = open("ro/f", unix.O_RDONLY)
	p["write ro/f"] = open("ro/f", unix.O_WRONLY)
	p["create ro/new"] = open("ro/new", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
	p["mkdir ro/d"] = res(unix.Mkdir(filepath.Join(dir, "ro/d"), 0o755))
	p["create rw/new"] = open("rw/new", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
	p["mkdir rw/d"] = res(unix.Mkdir(filepath.Join(dir, "rw/d"), 0o755))
	p["write rwfile"] = open("rwfile", unix.O_WRONLY)
	p["write dir/rwfile-new"] = open("rwfile-new", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL)
	status, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "NoNewPrivs:"); ok {
			p["no_new_privs"] = strings.TrimSpace(v)
		}
	}
	port, _ := strconv.Atoi(os.Getenv("LL_TCP"))
	p["tcp connect"] = sockProbe(unix.AF_INET, func(fd int) error {
		return unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}})
	})
	p["tcp bind"] = sockProbe(unix.AF_INET, func(fd int) error {
		return unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}})
	})
	p["abstract connect"] = sockProbe(unix.AF_UNIX, func(fd int) error {
		return unix.Connect(fd, &unix.SockaddrUnix{Name: os.Getenv("LL_ABSTRACT")})
	})
	p["signal parent"] = res(unix.Kill(os.Getppid(), 0))
	abi, _ := strconv.Atoi(os.Getenv("LL_ABI"))
	b, _ := json.Marshal(map[string]any{"abi": abi, "reason": os.Getenv("LL_REASON"), "probes": p})
	fmt.Printf("LANDLOCK-PROBES %s\n", b)
	os.Exit(0)
}

func sockProbe(domain int, f func(fd int) error) string {
	fd, err := unix.Socket(domain, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return "socket: " + err.Error()
	}
	defer unix.Close(fd)
	if err := f(fd); err != nil {
		var en syscall.Errno
		if errors.As(err, &en) {
			return unix.ErrnoName(en)
		}
		return err.Error()
	}
	return "ok"
}
