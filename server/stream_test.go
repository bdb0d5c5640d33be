package server

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"unicode/utf8"

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
		// On the wire: text, or base64 marked so.
		var wire struct{ Data, Encoding string }
		if err := json.Unmarshal(sc.Bytes(), &wire); err != nil {
			t.Fatal(err)
		}
		if wire.Encoding == api.EncodingBase64 {
			text64++
			if _, err := base64.StdEncoding.DecodeString(wire.Data); err != nil {
				t.Fatalf("event %s: %v", sc.Bytes(), err)
			}
		} else {
			plain++
			if !utf8.ValidString(wire.Data) {
				t.Fatalf("event %s: not UTF-8 and not marked base64", sc.Bytes())
			}
		}
		// Decoded: the bytes as written.
		var ev api.Event
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatal(err)
		}
		got = append(got, ev.Data...)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("the stream carried %q,\nwant %q", got, want)
	}
	if text64 == 0 || plain == 0 {
		t.Errorf("%d base64 and %d text chunks: want both", text64, plain)
	}
}
