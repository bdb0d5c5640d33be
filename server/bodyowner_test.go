package server

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// TestBodySlotsPerTenant: the body-read slots were counted per peer uid,
// so a tenant matched by group had a share of them for each of its
// uids, and a few of its users could hold every slot (with bodies sent
// at the minimum rate) while other tenants were refused. A tenant's
// uids share one tenant's part, as they share its run slots; a peer of
// no tenant has one of its own, as it owns its async runs.
func TestBodySlotsPerTenant(t *testing.T) {
	ts := startServer(t, `{"version": 1, "max_concurrency": 1, "prestart": -1, "warm": {"deno": 0},
		"tenants": [{"name": "g", "match": {"gid": 4300}, "max_concurrency": 1}]}`)
	total, perOwner := bodyCaps(1)
	if perOwner >= total {
		t.Fatalf("body caps %d, %d a peer: the test needs a part smaller than the whole", total, perOwner)
	}
	type answer struct {
		code int
		body api.ErrorBody
	}
	post := func(uid uint32, body io.Reader) <-chan answer {
		done := make(chan answer, 1)
		go func() {
			req := httptest.NewRequest(http.MethodPost, "http://pmjail/v1/runs", body)
			req = req.WithContext(context.WithValue(req.Context(), peerKey{}, &Peer{UID: uid, GID: 4300}))
			rec := httptest.NewRecorder()
			ts.Handler().ServeHTTP(rec, req)
			var eb api.ErrorBody
			_ = json.Unmarshal(rec.Body.Bytes(), &eb)
			done <- answer{rec.Code, eb}
		}()
		return done
	}
	// Users of tenant g, one body each, that never come: each holds a
	// slot (the recorder has no read deadline to cut them).
	var stalls []*io.PipeWriter
	defer func() {
		for _, w := range stalls {
			w.CloseWithError(io.ErrUnexpectedEOF)
		}
	}()
	for i := range perOwner {
		r, w := io.Pipe()
		stalls = append(stalls, w)
		post(uint32(4301+i), r)
	}
	waitFor(t, func() bool { ts.bodies.mu.Lock(); defer ts.bodies.mu.Unlock(); return ts.bodies.n == perOwner })
	// Another user of g is refused at once: its tenant holds its part.
	r, w := io.Pipe()
	stalls = append(stalls, w)
	select {
	case a := <-post(4301+uint32(perOwner), r):
		if a.code != http.StatusTooManyRequests || a.body.Error.Code != codeBusy {
			t.Errorf("another uid of tenant g with its part of the body slots held: %d %+v, want 429 busy", a.code, a.body)
		}
	case <-time.After(3 * bodySlotWait):
		t.Errorf("another uid of tenant g with its part of the body slots held took a slot (%d of %d held), want 429 busy",
			perOwner+1, total)
	}
}
