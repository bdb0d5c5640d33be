package server

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// keysOnce decodes one JSON log line and fails the test on a key that
// occurs twice at its top level; it returns the line's values.
func keysOnce(t *testing.T, line string) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(line))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		t.Fatalf("log line is not a JSON object: %s", line)
	}
	vals := map[string]any{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		key := tok.(string)
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		if _, dup := vals[key]; dup {
			t.Errorf("key %q twice in %s", key, line)
		}
		vals[key] = v
	}
	return vals
}

// Every value is plain: a duration as Go writes it, an error its message,
// and no null for an absent error, pointer, slice or map.
func TestLoggerPlainValues(t *testing.T) {
	var buf bytes.Buffer
	var nilErr error
	var nilPtr *struct{ A int }
	var nilSlice []string
	var nilMap map[string]int
	wrapped := fmt.Errorf("sweep cgroups: %w", io.ErrUnexpectedEOF)
	NewLogger(&buf, nil).Info("m", "grace", 30*time.Second, "err", wrapped, "none", nilErr,
		"ptr", nilPtr, "list", nilSlice, "map", nilMap, "n", 3, slog.Group("g", "wait", 1500*time.Millisecond))
	v := keysOnce(t, buf.String())
	if v["grace"] != "30s" {
		t.Errorf("grace: %#v, want \"30s\"", v["grace"])
	}
	if v["err"] != wrapped.Error() {
		t.Errorf("err: %#v, want %q", v["err"], wrapped)
	}
	if g, _ := v["g"].(map[string]any); g["wait"] != "1.5s" {
		t.Errorf("g.wait: %#v, want \"1.5s\"", v["g"])
	}
	for _, k := range []string{"none", "ptr"} {
		if x, ok := v[k]; ok {
			t.Errorf("%s: %#v, want the key left out", k, x)
		}
	}
	if l, ok := v["list"].([]any); !ok || len(l) != 0 {
		t.Errorf("list: %#v, want []", v["list"])
	}
	if m, ok := v["map"].(map[string]any); !ok || len(m) != 0 {
		t.Errorf("map: %#v, want {}", v["map"])
	}
	if strings.Contains(buf.String(), "null") {
		t.Errorf("a null in %s", buf.String())
	}
}

// A refused run's log line says msg once: the refusal's text is its
// detail, not a second msg.
func TestRunRejectedLogsMsgOnce(t *testing.T) {
	ts := startServer(t, `{"version": 1, "ceiling": {"limits": {"memory": "128M"}}}`)
	if status, _, _ := ts.post(t, strings.NewReader(`{"runtime": "deno", "source": "1", "limits": {"memory": "256M"}}`)); status != 400 {
		t.Fatalf("status %d, want 400", status)
	}
	var found bool
	for _, line := range strings.Split(strings.TrimSpace(ts.logs.String()), "\n") {
		v := keysOnce(t, line)
		if strings.Contains(line, "null") {
			t.Errorf("a null in %s", line)
		}
		if v["msg"] == "run rejected" {
			found = true
			if d, _ := v["detail"].(string); !strings.Contains(d, "memory") || v["field"] != "limits.memory" {
				t.Errorf("run rejected: %s, want the refusal as detail, the field as field", line)
			}
		}
	}
	if !found {
		t.Errorf("no run rejected line in:\n%s", ts.logs)
	}
}

// A reload that changes a setting applied only at start says so, naming
// it, rather than reporting a reload that left it as it was.
func TestReloadWarnsRestartOnlySettings(t *testing.T) {
	ts := startServer(t, `{"version": 1, "warm": {"deno": 0}, "prestart": -1}`)
	cfg, err := ParseConfig(strings.NewReader(`{"version": 1, "warm": {"deno": 0}, "prestart": -1, "warm_max_age": "1m"}`))
	if err != nil {
		t.Fatal(err)
	}
	cfg.Socket = ts.Config().Socket
	if err := ts.Reload(cfg); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(ts.logs.String(), "warm_max_age changes only at restart") {
		t.Errorf("no warning that warm_max_age takes a restart in:\n%s", ts.logs)
	}
}

// A daemon without a store of async runs says so at start: the operator
// learns it from the log, not from the first client refused.
func TestStartLogsAsyncOff(t *testing.T) {
	ts := startServer(t, `{"version": 1, "warm": {"deno": 0}, "prestart": -1}`)
	if !strings.Contains(ts.logs.String(), "async runs off") {
		t.Errorf("no line saying async runs are off in:\n%s", ts.logs)
	}
}
