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
	// Text that escaping grows, but not past twice (it stays text).
	text := strings.Repeat("héllo \"wörld\"\n", 1<<10)
	value := json.RawMessage(`{"answer":42}`)
	logs := []api.LogEntry{{Level: "info", Message: "kept"}}
	res := &api.Result{Status: api.StatusOK, Stdout: string(bin), Stderr: text, Logs: logs, Value: value,
		Encoding: api.Encoding{Stdout: api.OutputEncoding(string(bin)), Stderr: api.OutputEncoding(text)}} // as job.Assemble
	const max = 340 << 10
	data, err := encode(res, max)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > max {
		t.Fatalf("%d bytes, over %d", len(data), max)
	}
	// Cut to fit, not more: within a base64 group or an escaped character
	// of the room left for the record's framing.
	if room := max - resultSlack; len(data) < room-8 {
		t.Errorf("%d bytes where %d fit: %d bytes of output cut more than needed", len(data), room, room-len(data))
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
	// What the output's cut makes room for stays: the job's value and logs.
	if !bytes.Equal(got.Value, value) || len(got.Logs) != 1 || got.Logs[0].Message != "kept" {
		t.Errorf("value %s, logs %+v: lost to a cut of the output alone", got.Value, got.Logs)
	}
}
