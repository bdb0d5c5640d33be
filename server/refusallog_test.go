package server

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRefusalLogBounded: a refusal's log line ("run rejected", "batch
// rejected") carried its field and message whole, and both may hold
// what the client sent: a key a megabyte long, unknown or given twice,
// a runtime, profile or size of a megabyte. Each such request wrote two
// megabytes into the operator's log, at the pace a client can send
// them, and under journald (48K lines, 10,000 messages each 30 s) past
// its rate limit in a few hundred requests, the daemon's other lines
// dropped with them. The line says the field and the refusal within a
// bound; the answer, to the client alone, still names the field whole.
func TestRefusalLogBounded(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	huge := strings.Repeat("k", 1<<20)
	for _, tc := range []struct{ name, path, body, field string }{
		{"an unknown key", "/v1/runs", `{"runtime": "deno", "source": "1", "` + huge + `": 1}`, huge},
		{"a key twice in input", "/v1/runs", `{"runtime": "deno", "source": "1", "input": {"` + huge + `": 1, "` + huge + `": 2}}`, "input." + huge},
		{"a runtime", "/v1/runs", `{"runtime": "` + huge + `", "source": "1"}`, "runtime"},
		{"a batch's unknown key", "/v1/batches", `{"jobs": [{"runtime": "deno", "source": "1", "` + huge + `": 1}]}`, "jobs[0]." + huge},
	} {
		before := len(ts.logs.String())
		status, eb := rawPost(t, sock, tc.path, "", tc.body)
		grown := len(ts.logs.String()) - before
		if status != http.StatusBadRequest || eb.Error.Field != tc.field {
			t.Errorf("%s: %d naming %.40q, want 400 naming the field", tc.name, status, eb.Error.Field)
		}
		if grown > 4<<10 {
			t.Errorf("%s: %d bytes of the client's went into the log, which grew %d KiB, want a line of a bounded size", tc.name, len(tc.body), grown>>10)
		}
	}
}

// A client's refused requests are logged at a pace per peer uid, not
// one line each: a stream of bad requests would otherwise spend the
// journal's rate limit, which drops the daemon's other lines with them.
// Each refusal is still answered and counted.
func TestRefusalLogPaced(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	const sent = 200
	for range sent {
		if status, eb := rawPost(t, sock, "/v1/runs", "", `{"runtime": "cobol", "source": "1"}`); status != http.StatusBadRequest || eb.Error.Field != "runtime" {
			t.Fatalf("%d naming %q, want 400 naming runtime", status, eb.Error.Field)
		}
	}
	lines := strings.Count(ts.logs.String(), `"msg":"run rejected"`)
	if lines == 0 || lines > refusalBurst+2 {
		t.Errorf("%d refused requests logged %d lines, want at most about the burst of %d", sent, lines, refusalBurst)
	}
}

// The pace: a burst, then refusalRate a second, and the next line counts
// what was left out.
func TestRefusalLogAllow(t *testing.T) {
	var l refusalLog
	now := time.Unix(1_000_000, 0)
	for i := range refusalBurst {
		if ok, n := l.allow(7, now); !ok || n != 0 {
			t.Fatalf("line %d of the burst: %v, %d suppressed", i, ok, n)
		}
	}
	for range 5 {
		if ok, _ := l.allow(7, now); ok {
			t.Fatal("a line past the burst, at the same instant")
		}
	}
	if ok, _ := l.allow(8, now); !ok {
		t.Fatal("another uid's line held back by uid 7's")
	}
	if ok, n := l.allow(7, now.Add(time.Second/refusalRate)); !ok || n != 5 {
		t.Fatalf("after a token's time: %v, %d suppressed, want a line saying 5", ok, n)
	}
}
