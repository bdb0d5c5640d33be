package server

import (
	"context"
	"io"
	"net"
	"net/http"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pmjail/pmjail/internal/testenv"
)

// dialAsOn connects to addr over TCP from a socket owned by uid: the
// socket's owner is the fsuid of the thread that makes it, which only
// this locked thread changes, and only for the call.
// The socket is bound to device dev (SO_BINDTODEVICE, which Linux lets
// any user set on a socket of its own since 5.7), or to none if dev is
// empty.
func dialAsOn(t *testing.T, uid uint32, dev, addr string) net.Conn {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	var d net.Dialer
	if dev != "" {
		d.Control = func(_, _ string, rc syscall.RawConn) error {
			var err error
			if cerr := rc.Control(func(fd uintptr) {
				err = syscall.SetsockoptString(int(fd), syscall.SOL_SOCKET, syscall.SO_BINDTODEVICE, dev)
			}); cerr != nil {
				return cerr
			}
			return err
		}
	}
	syscall.RawSyscall(syscall.SYS_SETFSUID, uintptr(uid), 0, 0)
	c, err := d.Dial("tcp", addr)
	syscall.RawSyscall(syscall.SYS_SETFSUID, 0, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestMetricsListenerPerPeer: the metrics listener takes 8 connections
// and, on loopback, every local user may connect: one user that opened
// 8 and sent nothing on them (each held for the listener's timeouts,
// and opened again) left the scraper's connection closed as it was
// accepted. A local uid holds at most its part; the scraper, another
// uid, is served.
func TestMetricsListenerPerPeer(t *testing.T) {
	testMetricsListenerPerPeer(t, "")
}

// TestMetricsListenerPerPeerBoundToLoopback: the peer's uid was looked
// up for no device, which the kernel matches to no socket bound to one:
// uid 4243, its sockets bound to "lo" (any user may), was untellable on
// each connection, each a peer of its own, and took every connection
// the listener takes, the scraper's closed as it was accepted.
func TestMetricsListenerPerPeerBoundToLoopback(t *testing.T) {
	testMetricsListenerPerPeer(t, "lo")
}

// testMetricsListenerPerPeer has uid 4243 open every connection the
// metrics listener takes from sockets bound to dev (none if empty), then
// scrapes as root.
func testMetricsListenerPerPeer(t *testing.T, dev string) {
	ln := serveMetricsOn(t, "127.0.0.1:0")
	addr := ln.Addr().String()
	// uid 4243 holds every connection the listener takes, idle.
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for range metricsMaxConns {
		held = append(held, dialAsOn(t, 4243, dev, addr))
	}
	// Those over its part are closed as they were accepted: read them
	// back to know the listener has seen every one.
	open := 0
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			continue
		}
		open++
	}
	t.Logf("uid 4243: %d of its %d connections held open", open, len(held))
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/metrics", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("a scrape while uid 4243 holds %d idle connections: %v, want it served", open, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("a scrape while uid 4243 holds %d idle connections: %d", open, resp.StatusCode)
	}
	if open > metricsMaxConnsPerPeer {
		t.Errorf("uid 4243 held %d connections, over its part of %d", open, metricsMaxConnsPerPeer)
	}
}

// TestMetricsListenerPerPeerOverLocalAddresses: a listener beyond
// loopback counted a connection from any address but loopback's as the
// remote address's, but a local user may connect from each of the
// host's own addresses (the source of a connection to a local address
// is that address): one key, and one part, for each. Uid 4243, its
// connections to each local address and loopback, took every connection
// of the listener. A connection from a local address is the local
// uid's, as over loopback, whatever device its socket is bound to.
func TestMetricsListenerPerPeerOverLocalAddresses(t *testing.T) {
	// The host's addresses but loopback's, each with its device.
	type address struct{ host, dev string }
	var local []address
	ifs, err := net.Interfaces()
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range ifs {
		if i.Flags&net.FlagLoopback != 0 {
			continue
		}
		as, _ := i.Addrs()
		for _, a := range as {
			ipn, ok := a.(*net.IPNet)
			if !ok {
				continue
			}
			host := ipn.IP.String()
			if ipn.IP.IsLinkLocalUnicast() {
				host += "%" + i.Name // dialled with its zone
			}
			local = append(local, address{host, i.Name})
		}
	}
	testenv.Need(t, len(local) > 0, "an address other than loopback's")
	ln := serveMetricsOn(t, ":0")
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	// From each address, sockets bound to no device and to the
	// address's (which the kernel matches only to a look-up of that
	// device), and from loopback.
	dials := []address{{"127.0.0.1", ""}}
	for _, a := range local {
		dials = append(dials, address{a.host, ""}, a)
	}
	for _, a := range dials {
		for range metricsMaxConnsPerPeer {
			held = append(held, dialAsOn(t, 4243, a.dev, net.JoinHostPort(a.host, port)))
		}
	}
	open := 0
	for _, c := range held {
		_ = c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err == io.EOF {
			continue
		}
		open++
	}
	t.Logf("uid 4243, from %d local addresses (bound to their device or none) and loopback: %d of its %d connections held open", len(local), open, len(held))
	if open > metricsMaxConnsPerPeer {
		t.Errorf("uid 4243 held %d connections, over its part of %d", open, metricsMaxConnsPerPeer)
	}
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := hc.Get("http://127.0.0.1:" + port + "/metrics")
	if err != nil {
		t.Fatalf("a scrape while uid 4243 holds %d idle connections: %v, want it served", open, err)
	}
	resp.Body.Close()
}

// serveMetricsOn starts a daemon and serves its metrics on a TCP
// listener at addr until the test ends.
func serveMetricsOn(t *testing.T, addr string) net.Listener {
	t.Helper()
	ts := startServer(t, `{"version": 1}`)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	served := make(chan error, 1)
	go func() { served <- ts.ServeMetrics(ln) }()
	t.Cleanup(func() {
		_ = ts.metricsHTTP.Close()
		if err := <-served; err != nil {
			t.Error(err)
		}
	})
	return ln
}
