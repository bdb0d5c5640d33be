package server

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// The streamed answers are the bytes json.Encoder would write, so every
// client (and curl) reads them as before.
func TestResultStreamedAsEncoded(t *testing.T) {
	res := &jail.Result{ID: "j1", Status: jail.StatusOK, Value: json.RawMessage(`{"stdout":""}`),
		Stdout: strings.Repeat("\x01日<", 40000), Stderr: "e\n", Logs: []jail.LogEntry{{Level: "info", Message: "m"}}}

	var want bytes.Buffer
	_ = json.NewEncoder(&want).Encode(res)
	rec := httptest.NewRecorder()
	if err := writeResult(rec, res); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
		t.Errorf("result body differs from json.Encoder's: %.200s", rec.Body.Bytes())
	}
	if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("content type %q", ct)
	}

	want.Reset()
	_ = json.NewEncoder(&want).Encode(api.Event{Type: api.EventResult, Result: res})
	rec = httptest.NewRecorder()
	newEvents(rec).result(res)
	if !bytes.Equal(rec.Body.Bytes(), want.Bytes()) {
		t.Errorf("result event differs from json.Encoder's: %.200s", rec.Body.Bytes())
	}
}
