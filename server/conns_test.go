package server

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/testenv"
)

// holdConnsEnv runs TestHelperHoldConns as the idle-connection holder:
// "UNIX-PATH TCP-ADDR COUNT".
const holdConnsEnv = "PMJAIL_TEST_HOLD_CONNS"

// nobody is the uid and gid the holder takes: another local user.
const nobody = 65534

// TestConnCapsIdleHolder is the review's attack on the daemon's file
// descriptors: under a small RLIMIT_NOFILE, another local user holds
// hundreds of idle connections to the socket and to the metrics
// listener; a run of the daemon's own uid must still run.
func TestConnCapsIdleHolder(t *testing.T) {
	testenv.RequireRoot(t)
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	low := rl
	low.Cur = 256
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Error(err)
		}
	})
	// A socket another user can reach, as a 0666 socket in a public
	// directory is.
	dir, err := os.MkdirTemp("", "conns-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "max_concurrency": 1, "prestart": -1,
		"socket": {"mode": "0666"}, "allow": {"uids": [%d]}}`, nobody), filepath.Join(dir, "pmjail.sock"))
	mln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ts.ServeMetrics(mln) }()
	t.Cleanup(func() {
		ts.metricsHTTP.Close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})

	const held = 200
	holder := exec.Command(os.Args[0], "-test.run=^TestHelperHoldConns$")
	holder.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %d", holdConnsEnv, ts.sock, mln.Addr(), held))
	stdin, err := holder.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := holder.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	holder.Stderr = os.Stderr
	if err := holder.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close() // the holder lets go and exits
		if err := holder.Wait(); err != nil {
			t.Errorf("holder: %v", err)
		}
	})
	var report string
	for sc := bufio.NewScanner(stdout); sc.Scan(); {
		if line := sc.Text(); strings.HasPrefix(line, "held ") {
			report = line
			break
		}
	}
	if report == "" {
		t.Fatal("the holder said nothing")
	}
	t.Log(report)
	var unixServed, tcpServed int
	if _, err := fmt.Sscanf(report, "held unix=%d tcp=%d", &unixServed, &tcpServed); err != nil {
		t.Fatalf("holder's report %q: %v", report, err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log("still here")`})
	if err != nil {
		t.Fatalf("a run while another user holds %d idle connections: %v", 2*held, err)
	}
	if res.Status != api.StatusOK || res.Stdout != "still here\n" {
		t.Errorf("a run while another user holds %d idle connections: %s %+v %q", 2*held, res.Status, res.Error, res.Stdout)
	}
	if unixServed >= held || tcpServed > metricsMaxConns {
		t.Errorf("served %d of %d connections of one uid on the socket and %d of %d on the metrics listener, want them capped",
			unixServed, held, tcpServed, held)
	}
}

// TestHelperHoldConns is not a test: it is the idle-connection holder of
// TestConnCapsIdleHolder, run as its own process (its fds are not the
// daemon's). As uid nobody, it opens COUNT connections to the socket and
// as many to the metrics listener, makes one request on each (which
// tells an accepted connection from one left in the backlog), says how
// many were answered, and keeps them open, idle, until its stdin closes.
func TestHelperHoldConns(t *testing.T) {
	arg := os.Getenv(holdConnsEnv)
	if arg == "" {
		t.Skip("the holder of TestConnCapsIdleHolder")
	}
	f := strings.Fields(arg)
	n, _ := strconv.Atoi(f[2])
	if err := syscall.Setresgid(nobody, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Setresuid(nobody, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
		count = map[string]int{}
	)
	hold := func(network, addr, path string) {
		defer wg.Done()
		c, err := net.Dial(network, addr)
		if err != nil {
			return
		}
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		_ = c.SetDeadline(time.Now().Add(3 * time.Second))
		if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: pmjail\r\n\r\n"); err != nil {
			return
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			return // refused, or never accepted
		}
		resp.Body.Close()
		mu.Lock()
		count[network]++
		mu.Unlock()
	}
	for range n {
		wg.Add(2)
		go hold("unix", f[0], "/v1/health")
		go hold("tcp", f[1], "/metrics")
	}
	wg.Wait()
	fmt.Printf("held unix=%d tcp=%d\n", count["unix"], count["tcp"])
	_, _ = io.Copy(io.Discard, os.Stdin)
	for _, c := range conns {
		c.Close()
	}
}

// TestRunRefusedShortOfFDs: a run the daemon has too few file
// descriptors left for is refused, 503 busy, rather than left to fail
// half-way as pmjail's own error.
func TestRunRefusedShortOfFDs(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "prestart": -1}`)
	open, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	low := rl
	low.Cur = uint64(len(open) + runFDReserve/2)
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &low); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Error(err)
		}
	})
	status, eb, hdr := ts.post(t, strings.NewReader(`{"runtime": "deno", "source": "1"}`))
	if status != http.StatusServiceUnavailable || eb.Error.Code != api.CodeBusy || hdr.Get("Retry-After") == "" {
		t.Errorf("a run with %d fds free: %d %+v, want 503 busy with Retry-After", runFDReserve/2, status, eb)
	}
}

func TestConnCapConfig(t *testing.T) {
	total, perUID := defaultConnCaps()
	cfg := mustConfig(t, `{"version": 1}`)
	if cfg.Socket.MaxConns != total || cfg.Socket.MaxConnsPerUID != perUID || perUID >= total || total > nofile()/2 {
		t.Errorf("defaults: %d, %d per uid (from %d fds), want well below the fd limit", cfg.Socket.MaxConns, cfg.Socket.MaxConnsPerUID, nofile())
	}
	cfg = mustConfig(t, `{"version": 1, "socket": {"max_connections": 10, "max_connections_per_uid": 3}}`)
	if cfg.Socket.MaxConns != 10 || cfg.Socket.MaxConnsPerUID != 3 {
		t.Errorf("set: %+v", cfg.Socket)
	}
	if _, err := ParseConfig(strings.NewReader(`{"version": 1, "socket": {"max_connections": -1}}`)); err == nil {
		t.Error("a negative max_connections accepted")
	}
}

func TestConnCapBounds(t *testing.T) {
	l := &connCap{max: 3, perUID: 2, unix: true, byUID: map[string]int{}}
	for _, uid := range []uint32{1, 1, 2} {
		if !l.take(uidPeer(uid)) {
			t.Fatalf("uid %d refused under the caps", uid)
		}
	}
	if l.take(uidPeer(3)) {
		t.Error("a fourth connection taken over the global cap of 3")
	}
	l.give(uidPeer(2))
	if l.take(uidPeer(1)) {
		t.Error("uid 1's third connection taken over its cap of 2")
	}
	if !l.take(uidPeer(3)) {
		t.Error("uid 3 refused with a place free")
	}
	// A listener without a per-peer cap counts them in all only.
	m := &connCap{max: 2, byUID: map[string]int{}}
	for i, want := range []bool{true, true, false} {
		if got := m.take(noCredsPeer); got != want {
			t.Errorf("a cap of 2 in all: connection %d taken %v, want %v", i+1, got, want)
		}
	}
}
