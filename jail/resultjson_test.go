package jail

import (
	"bytes"
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
