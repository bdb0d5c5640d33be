package server

import (
	"bufio"
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// Output that is not UTF-8 crosses an event stream as base64 chunks with
// their encoding, and text as itself: every one of the 256 byte values
// comes back as written, however the writes cut it.
func TestOutputStreamCarriesBytes(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	text := []byte("héllo, wörld\n")
	want := append(append(append([]byte{}, text...), all...), text...)
	w := httptest.NewRecorder()
	o := &outputStream{e: newEvents(w), typ: api.EventStdout}
	// Writes of 7 bytes cut "é" and "ö" in two, and the bytes anywhere.
	for p := want; len(p) > 0; p = p[min(7, len(p)):] {
		_, _ = o.Write(p[:min(7, len(p))])
	}
	o.flush()
	var got []byte
	var text64, plain int
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		b, _, err := (&api.Result{Stdout: ev.Data, Encoding: api.Encoding{Stdout: ev.Encoding}}).Output()
		if err != nil {
			t.Fatalf("event %s: %v", sc.Bytes(), err)
		}
		if ev.Encoding == api.EncodingBase64 {
			text64++
		} else {
			plain++
		}
		got = append(got, b...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the stream carried %q,\nwant %q", got, want)
	}
	if text64 == 0 || plain == 0 {
		t.Errorf("%d base64 and %d text chunks: want both", text64, plain)
	}
}
