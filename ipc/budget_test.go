package ipc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestBudgetWaitsForRelease(t *testing.T) {
	b := NewBudget(100)
	ctx := context.Background()
	if err := b.Acquire(ctx, 101); !errors.Is(err, ErrOverBudget) {
		t.Fatalf("a reservation over the whole budget: %v, want ErrOverBudget", err)
	}
	if err := b.Acquire(ctx, 70); err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() { got <- b.Acquire(ctx, 50) }()
	select {
	case err := <-got:
		t.Fatalf("acquired over the budget (%v)", err)
	case <-time.After(50 * time.Millisecond):
	}
	b.Release(40)
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if b.Held() != 80 || b.Peak() != 80 {
		t.Fatalf("held %d peak %d, want 80 80", b.Held(), b.Peak())
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := b.Acquire(short, 30); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait past its context: %v", err)
	}
	var nilBudget *Budget
	if err := nilBudget.Acquire(ctx, 1<<40); err != nil {
		t.Fatal(err)
	}
	nilBudget.Release(1 << 40)
}

// controlServer answers n bytes of \x01 with a Content-Length, or
// chunked.
func controlServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, err := strconv.Atoi(r.URL.Query().Get("n"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		if r.URL.Query().Get("chunked") == "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		w.Header().Set("X-Ctl", "a<&>é")
		_, _ = w.Write([]byte(strings.Repeat("\x01", n)))
	}))
	t.Cleanup(srv.Close)
	return srv
}

// Sixteen concurrent replies of control characters share one budget: the
// ones too big escaped are refused before they are built, the others wait
// their turn, and none goes over.
func TestReplyBudgetSharedByConcurrentCalls(t *testing.T) {
	noLeak(t)
	srv := controlServer(t)
	ceil := PermissiveCeiling()
	// The calls wait on each other for the budget, and the race detector
	// slows their copying tenfold: on a busy host the default caps (a
	// call, a reply the guest takes, a frame the guest waits for) would
	// time them out, and this test is not about timeouts.
	ceil.RequestTimeout = 2 * time.Minute
	ceil.WriteTimeout = 2 * time.Minute
	budget := replyBudget(ceil.WithDefaults())
	caps := Capabilities{Request: &RequestCapability{URLs: []string{srv.URL}}}
	r := startServe(t, context.Background(), SessionConfig{Capabilities: caps, Ceiling: ceil, ReplyBudget: budget})
	r.g.wait = 2 * time.Minute

	const fits = 600 << 10 // 3.6 MiB escaped: under the 4 MiB frame cap
	urls := map[uint64]string{}
	for i := uint64(1); i <= DefaultMaxInFlight; i++ {
		switch i % 4 {
		case 0:
			urls[i] = srv.URL + "/?n=" + strconv.Itoa(2<<20)
		case 1:
			urls[i] = srv.URL + "/?chunked=1&n=" + strconv.Itoa(2<<20)
		case 2:
			urls[i] = srv.URL + "/?n=" + strconv.Itoa(fits)
		case 3:
			urls[i] = srv.URL + "/?chunked=1&n=" + strconv.Itoa(fits)
		}
	}
	var mu sync.Mutex
	go func() {
		mu.Lock()
		defer mu.Unlock()
		for id, u := range urls {
			r.g.send(map[string]any{"type": "call", "id": id, "method": "request.send", "params": map[string]string{"url": u}})
		}
	}()
	for range urls {
		f := r.g.recv()
		big := strings.Contains(urls[f.ID], strconv.Itoa(2<<20))
		if big {
			wantCode(t, f, CodeTooLarge)
			continue
		}
		res := decodeResult(t, f)
		if res.Body != strings.Repeat("\x01", fits) || res.Headers["x-ctl"] != "a<&>é" {
			t.Fatalf("call %d: body of %d bytes, headers %v", f.ID, len(res.Body), res.Headers)
		}
		// The value is what json.Marshal makes of the same result.
		want, _ := json.Marshal(res)
		if string(f.Value) != string(want) {
			t.Fatalf("call %d: value differs from json.Marshal's", f.ID)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	out := r.finish(t)
	if out.ProtocolError != nil {
		t.Fatal(out.ProtocolError)
	}
	if budget.Held() != 0 {
		t.Errorf("%d bytes still held after every reply", budget.Held())
	}
	if budget.Peak() > budget.size || budget.Peak() == 0 {
		t.Errorf("peak %d of a %d-byte budget", budget.Peak(), budget.size)
	}
	t.Logf("budget %d MiB, peak %.1f MiB", budget.size>>20, float64(budget.Peak())/(1<<20))
}
