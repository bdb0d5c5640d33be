package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"slices"
	"testing"
	"time"
)

func TestTimeIsUTCToTheMillisecond(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8e6+999, time.FixedZone("x", 3600))
	b, err := json.Marshal(Result{StartedAt: Time{at}})
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	if got := string(m["started_at"]); got != `"2026-03-04T04:06:07.008Z"` {
		t.Errorf("started_at %s", got)
	}
	if _, ok := m["finished_at"]; ok {
		t.Errorf("a zero time is left out: %s", b)
	}
	if got := string(m["queued_ms"]); got != "0" {
		t.Errorf("queued_ms %q, want 0 always written", got)
	}
	var back Result
	if err := json.Unmarshal(b, &back); err != nil || !back.StartedAt.Equal(at.Truncate(time.Millisecond)) {
		t.Errorf("read back %v: %v", back.StartedAt, err)
	}
}

// TestStatusesListsEveryStatus: a status constant added to result.go but
// not to Statuses would be missing wherever the statuses are enumerated
// (the daemon's metrics).
func TestStatusesListsEveryStatus(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "result.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var declared []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); ok && id.Name == "Status" {
				for _, n := range vs.Names {
					declared = append(declared, n.Name)
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("no Status constants found in result.go")
	}
	listed := Statuses()
	if len(listed) != len(declared) {
		t.Errorf("Statuses has %d entries, result.go declares %d statuses (%v)", len(listed), len(declared), declared)
	}
	for _, s := range listed {
		if slices.Contains(listed[slices.Index(listed, s)+1:], s) {
			t.Errorf("Statuses lists %q twice", s)
		}
	}
}
