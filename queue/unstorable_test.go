package queue

import (
	"context"
	"encoding/json"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// hugeError is a runner whose result carries a guest's error as large as
// the daemon lets one be (the frame cap, 4 MiB as the result holds it,
// the message, stack, value and causes together): a message, a stack and
// a cause of '<', six bytes each in JSON, over the servers' max_payload
// of 1 MiB even with no output.
type hugeError struct{ calls atomic.Int32 }

// hugeText is what hugeError's error is made of: 1.2 MB as JSON.
var hugeText = strings.Repeat("<", 200<<10)

func (h *hugeError) Execute(context.Context, string, []byte) (*api.Result, error) {
	h.calls.Add(1)
	return &api.Result{Status: api.StatusError, ExitCode: 1, Stdout: "out", Logs: []api.LogEntry{},
		Error: &api.ErrorInfo{Code: "Error", Message: "boom " + hugeText, Stack: hugeText,
			Value: json.RawMessage(`{"v":"` + hugeText[:50<<10] + `"}`),
			Cause: &api.ErrorInfo{Code: "Error", Message: hugeText}}}, nil
}

// A guest whose error does not fit in a message has its job run once and
// its result stored, the error cut: the store was never tried, the job
// was sent back, run again at each of its max_deliver deliveries, and
// left with no result, its submitter waiting for ever.
func TestWorkerStoresAResultWhoseErrorIsTooLarge(t *testing.T) {
	cfg, c := setup(t, 5*time.Second)
	h := &hugeError{}
	startWorker(t, cfg, h)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res, err := c.Run(ctx, "alice", &api.Job{Runtime: "deno", Source: "throw"})
	if n := h.calls.Load(); n != 1 {
		t.Errorf("the job ran %d times, want once", n)
	}
	if err != nil {
		t.Fatalf("no result: %v", err)
	}
	if res.Status != api.StatusError || res.Error == nil || res.Error.Code != "Error" {
		t.Fatalf("result %+v, want the guest's error", res)
	}
	msg := res.Error.Message
	if !strings.HasPrefix(msg, "boom <<<") || !strings.HasSuffix(msg, errorCut) {
		t.Errorf("error message %.40q…%q: want its start, marked cut", msg, msg[max(0, len(msg)-60):])
	}
	if res.Error.Stack != "" || res.Error.Value != nil || res.Error.Cause != nil {
		t.Errorf("error kept its stack (%d), value (%d) or cause (%v)", len(res.Error.Stack), len(res.Error.Value), res.Error.Cause != nil)
	}
	if res.Stdout != "" || !res.Truncated.Stdout {
		t.Errorf("stdout %q truncated %v: the output goes first", res.Stdout, res.Truncated.Stdout)
	}
}

// A guest's error cut to fit keeps as much of its message as fits, and
// its code within a bound, whatever a forged frame made of them.
func TestEncodeCutsTheError(t *testing.T) {
	const room = 256 << 10
	res := &api.Result{Status: api.StatusError, Logs: []api.LogEntry{},
		Error: &api.ErrorInfo{Code: hugeText, Message: "é" + hugeText, Stack: hugeText}}
	data, err := encode(res, room)
	if err != nil {
		t.Fatal(err)
	}
	if len(data) > room {
		t.Fatalf("%d bytes, over %d", len(data), room)
	}
	var got api.Result
	if err := json.Unmarshal(data, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Error.Code) != maxErrorCode/6 || !strings.HasPrefix(hugeText, got.Error.Code) {
		t.Errorf("code of %d bytes, want %d of the guest's", len(got.Error.Code), maxErrorCode/6)
	}
	if len(data) < room-resultSlack-64 {
		t.Errorf("%d bytes where %d fit: more of the message cut than needed", len(data), room-resultSlack)
	}
	msg := strings.TrimSuffix(got.Error.Message, errorCut)
	if msg == got.Error.Message || !strings.HasPrefix("é"+hugeText, msg) {
		t.Errorf("message %.20q… not a prefix of the guest's, marked cut", got.Error.Message)
	}
}
