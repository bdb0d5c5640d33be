package jail

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestCancelledReason: a run whose caller gave up is cancelled, naming
// why; one whose context ran out its deadline is pmjail's fault, since
// the run's own wall-clock limit should have ended it first.
func TestCancelledReason(t *testing.T) {
	gone := errors.New("the client went away")
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(gone)
	if r := cancelled(ctx); r.status != StatusCancelled || r.msg != "run cancelled: the client went away" {
		t.Errorf("a caller gone: %+v, want status cancelled naming the cause", r)
	}
	ctx, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if r := cancelled(ctx); r.status != StatusCancelled {
		t.Errorf("a plain cancel: %+v, want status cancelled", r)
	}
	ctx, cancel3 := context.WithTimeout(context.Background(), time.Nanosecond)
	defer cancel3()
	<-ctx.Done()
	if r := cancelled(ctx); r.status != StatusInternalError || !strings.Contains(r.msg, "deadline exceeded") {
		t.Errorf("a deadline: %+v, want status internal_error", r)
	}
	if code, ok := StatusCancelled.ExitCode(); !ok || code != 125 {
		t.Errorf("cancelled exits %d (%v), want 125", code, ok)
	}
}
