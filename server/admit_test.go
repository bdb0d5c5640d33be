package server

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/job"
)

// TestBodyReadsBounded is the review's attack on the daemon's memory:
// many connections each send the headers and most of a large job, then
// stall. The daemon must hold only a few such bodies at once, refuse the
// rest, and cut a stalled body at the minimum rate, not after 30 s.
func TestBodyReadsBounded(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "prestart": -1}`)
	const (
		conns = 40
		sent  = 2 << 20
	)
	payload := []byte(fmt.Sprintf("POST /v1/runs HTTP/1.1\r\nHost: pmjail\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n",
		job.MaxRequestBytes) + `{"runtime": "deno", "source": "` + strings.Repeat("a", sent))

	var before runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	start := time.Now()
	cs := make([]net.Conn, conns)
	var wg sync.WaitGroup
	for i := range cs {
		c, err := net.Dial("unix", ts.sock)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		cs[i] = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The write ends when the daemon has read all but a socket
			// buffer of it, refused it, or the deadline passed.
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			_, _ = c.Write(payload)
		}()
	}
	wg.Wait()
	var after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grown := int64(after.HeapAlloc) - int64(before.HeapAlloc); grown > 32<<20 {
		t.Errorf("%d stalled bodies of %d MiB grew the heap by %d MiB, want it bounded", conns, sent>>20, grown>>20)
	}

	// Every connection is answered well before the old flat 30 s: the
	// bodies read are cut at the minimum rate, the others refused.
	statuses := map[int]int{}
	for _, c := range cs {
		_ = c.SetReadDeadline(start.Add(20 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Errorf("no answer to a stalled body %v after it began: %v", time.Since(start).Round(time.Second), err)
			continue
		}
		resp.Body.Close()
		statuses[resp.StatusCode]++
	}
	t.Logf("answers %v in %v", statuses, time.Since(start).Round(time.Millisecond))
	if statuses[http.StatusTooManyRequests]+statuses[http.StatusServiceUnavailable] == 0 {
		t.Errorf("answers %v: want the bodies beyond the read slots refused", statuses)
	}

	// The slots are given back: a job runs afterwards.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := ts.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log(1)`})
	if err != nil || res.Status != api.StatusOK {
		t.Fatalf("a run after the stalled bodies: %v %+v", err, res)
	}
}

func TestBodyGate(t *testing.T) {
	g := newBodyGate(3, 2)
	ctx := context.Background()
	var held []func()
	for _, uid := range []string{"uid:1", "uid:1", "tenant:2"} {
		release, err := g.take(ctx, uid)
		if err != nil {
			t.Fatalf("%s: %v", uid, err)
		}
		held = append(held, release)
	}
	// Uid 1 holds its two: refused for its share, though the gate is
	// also full; uid 3 finds the gate full.
	if _, err := g.take(ctx, "uid:1"); !errors.Is(err, errOwnerBodiesFull) {
		t.Errorf("uid 1 over its share: %v, want errOwnerBodiesFull", err)
	}
	if _, err := g.take(ctx, "uid:3"); !errors.Is(err, errBodiesFull) {
		t.Errorf("uid 3 with the gate full: %v, want errBodiesFull", err)
	}
	// A waiter gets the slot that frees, however long it waited.
	got := make(chan error, 1)
	go func() {
		release, err := g.take(ctx, "uid:3")
		if err == nil {
			release()
		}
		got <- err
	}()
	held[2]()
	held[2]() // a second release gives nothing back
	if err := <-got; err != nil {
		t.Errorf("uid 3 after a slot freed: %v", err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.n != 2 || g.byOwner["uid:1"] != 2 || len(g.byOwner) != 1 {
		t.Errorf("after the releases: %d held, by owner %v; want uid 1's two", g.n, g.byOwner)
	}
}

// The body-read caps derive from max_concurrency (bodyCaps), which a
// reload applies: they kept the start's, so that a daemon reloaded from
// 1 run slot to 16 still read 8 bodies at once, 2 of a uid (and one
// reloaded down kept reading 32).
func TestBodyCapsFollowAReload(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "prestart": -1, "warm": {"deno": 0}}`)
	caps := func() (int, int) {
		ts.bodies.mu.Lock()
		defer ts.bodies.mu.Unlock()
		return ts.bodies.total, ts.bodies.perOwner
	}
	cfg, err := ParseConfig(strings.NewReader(`{"version": 1, "max_concurrency": 16, "prestart": -1, "warm": {"deno": 0}}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Socket.Path = ts.sock
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	wantTotal, wantUID := bodyCaps(16)
	if total, perUID := caps(); total != wantTotal || perUID != wantUID {
		t.Errorf("after a reload to max_concurrency 16: %d body slots, %d a uid; want %d, %d", total, perUID, wantTotal, wantUID)
	}
}
