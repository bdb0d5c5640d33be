package queue

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/pmjail/pmjail/api"
)

// A result over the message's size has its output cut to fit: what is
// left of each stream is the stream's first bytes, unaltered, whatever it
// held (bytes that are not UTF-8 cross in base64 and were dropped
// everywhere, not only at the cut), and a text stream is cut at a
// character's boundary.
func TestEncodeCutsOutputToAPrefix(t *testing.T) {
	var bin []byte
	for len(bin) < 256<<10 {
		for b := range 256 {
			bin = append(bin, byte(b))
		}
	}
	text := strings.Repeat("héllo wörld ", 1<<10)
	res := &api.Result{Status: api.StatusOK, Stdout: string(bin), Stderr: text, Logs: []api.LogEntry{},
		Encoding: api.Encoding{Stdout: api.OutputEncoding(string(bin)), Stderr: api.OutputEncoding(text)}} // as job.Assemble
	const max = 340 << 10
	data, err := encode(res, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > max {
		t.Fatalf("%d bytes, over %d", len(data), max)
	}
	var got api.Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if !got.Truncated.Stdout || !got.Truncated.Stderr {
		t.Errorf("truncated %+v, want both cut", got.Truncated)
	}
	if !bytes.HasPrefix(bin, []byte(got.Stdout)) || len(got.Stdout) == 0 {
		t.Errorf("stdout: %d bytes (%q...), not a prefix of the %d written", len(got.Stdout), got.Stdout[:min(20, len(got.Stdout))], len(bin))
	}
	if !strings.HasPrefix(text, got.Stderr) || !utf8.ValidString(got.Stderr) {
		t.Errorf("stderr: %d bytes, not a prefix of the text written cut at a character", len(got.Stderr))
	}
}
