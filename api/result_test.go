package api

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"math/rand/v2"
	"slices"
	"strings"
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

// A stream crosses the wire as text unless it is not UTF-8, or its JSON
// string would be over twice its size: a guest printing control
// characters (or <, > and &, which encoding/json escapes as \u003c) made
// its output six times its size in every JSON copy the daemon held.
func TestOutputEncoding(t *testing.T) {
	for _, c := range []struct {
		name, s, want string
	}{
		{"text", "hello, world\n", ""},
		{"empty", "", ""},
		{"newlines alone", "\n\n\n\n", ""},
		{"quotes alone", `""""`, ""},
		{"JSON printed", `{"a": [1, 2, "x"], "b": {"c": null}}` + "\n", ""},
		{"HTML with text", `<div class="greeting">Hello, world, and welcome</div>`, ""},
		{"control characters", strings.Repeat("\x01", 100), EncodingBase64},
		{"a quarter control", strings.Repeat("abc\x01", 100), EncodingBase64},
		{"a fifth control", strings.Repeat("abcd\x01", 100), ""},
		{"markup alone", strings.Repeat("<>", 100), EncodingBase64},
		{"line separators", strings.Repeat("\u2028", 30), ""},
		{"not UTF-8", "a\xffb", EncodingBase64},
	} {
		if got := OutputEncoding(c.s); got != c.want {
			t.Errorf("%s: OutputEncoding(%.40q) = %q, want %q", c.name, c.s, got, c.want)
		}
	}
	// The rule agrees with encoding/json's own escaping, byte for byte.
	alphabet := []string{"a", "\x01", "\n", `"`, "<", "&", "é", "\u2028", "\t", "\\", "\x7f", " "}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b strings.Builder
		for range rng.IntN(40) {
			b.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		s := b.String()
		j, _ := json.Marshal(s)
		want := ""
		if len(j)-2 > 2*len(s) {
			want = EncodingBase64
		}
		if got := OutputEncoding(s); got != want {
			t.Fatalf("OutputEncoding(%q) = %q; its JSON string is %d bytes for %d, want %q", s, got, len(j)-2, len(s), want)
		}
	}
}
