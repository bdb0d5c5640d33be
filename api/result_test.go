package api

import (
	"encoding/json"
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
