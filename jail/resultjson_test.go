package jail

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// WriteJSON is json.Marshal's encoding of the result, whatever the output
// and wherever else a "stdout" member appears.
func TestResultWriteJSONMatchesMarshal(t *testing.T) {
	nasty := `{"stdout":"","stderr":""}`
	for _, r := range []*Result{
		{},
		{ID: "a1", Status: StatusOK, Stdout: "hi\n", Logs: []LogEntry{}},
		{
			ID: "b2", Status: StatusError, ExitCode: 3, Signal: "SIGKILL",
			Value:     json.RawMessage(`{"x":[1,` + nasty + `],"stdout":"","stderr":""}`),
			Error:     &ErrorInfo{Code: "exit", Message: `,"stdout":"","stderr":""`, Stack: "at <anonymous>"},
			Stdout:    strings.Repeat("\x01<&>\u2028日\xff", 5000),
			Stderr:    strings.Repeat("e\"\\\n", 7000),
			Truncated: Truncated{Stdout: true},
			Logs:      []LogEntry{{Level: "info", Message: nasty, Meta: json.RawMessage(nasty)}},
			LimitsHit: []string{"output"},
			Denied:    map[string]uint64{"ptrace": 2},
			Usage:     Usage{WallMS: 5, CPUMS: 4, PeakMemoryBytes: 1 << 20, PeakTasks: 3, BrokerCalls: 9},
			StartedAt: api.Time{Time: time.Unix(1, 5e6)}, FinishedAt: api.Time{Time: time.Unix(2, 0)},
			QueuedMS: 7, Labels: map[string]string{"stdout": ""},
			Posture: &api.Posture{Mode: "auto", Notes: []string{`,"stdout":"","stderr":""`}},
		},
		// Streams that are not UTF-8 go in base64, in pieces: lengths on
		// either side of a piece's and of base64's 3-byte groups.
		{ID: "c3", Stdout: strings.Repeat("\xff\x00", 48<<10) + "x", Stderr: "\xfe",
			Encoding: api.Encoding{Stdout: api.EncodingBase64, Stderr: api.EncodingBase64}},
		{ID: "d4", Stdout: strings.Repeat("\x80", 3*(48<<10)), Stderr: "ok", Encoding: api.Encoding{Stdout: api.EncodingBase64}},
	} {
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got bytes.Buffer
		if err := WriteJSON(&got, r); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got.Bytes(), want) {
			t.Errorf("WriteJSON differs from json.Marshal:\n got %.300s\nwant %.300s", got.Bytes(), want)
		}
	}
}

// A result whose streams are not UTF-8 crosses the wire in base64 and
// comes back as the bytes written: all 256 of them.
func TestResultBytesRoundTrip(t *testing.T) {
	all := make([]byte, 256)
	for i := range all {
		all[i] = byte(i)
	}
	r := &Result{ID: "e5", Stdout: string(all), Stderr: "text\n"}
	r.Encoding = api.Encoding{Stdout: api.OutputEncoding(r.Stdout), Stderr: api.OutputEncoding(r.Stderr)}
	var b bytes.Buffer
	if err := WriteJSON(&b, r); err != nil {
		t.Fatal(err)
	}
	var wire struct {
		Stdout, Stderr string
		Encoding       map[string]string
	}
	if err := json.Unmarshal(b.Bytes(), &wire); err != nil {
		t.Fatal(err)
	}
	if wire.Encoding["stdout"] != "base64" || wire.Encoding["stderr"] != "" || wire.Stderr != "text\n" ||
		wire.Stdout != base64.StdEncoding.EncodeToString(all) {
		t.Fatalf("on the wire: %+v", wire)
	}
	var back Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Stdout != string(all) || back.Stderr != "text\n" || back.Encoding != r.Encoding {
		t.Fatalf("decoded: stdout %q stderr %q encoding %+v", back.Stdout, back.Stderr, back.Encoding)
	}
}
