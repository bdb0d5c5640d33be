package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

// TestRequestVariant: a Call is what is timed; After runs once the clock
// has stopped, and a failure of either is the variant's, by name.
func TestRequestVariant(t *testing.T) {
	var calledAt, afterAt time.Duration
	v := Variant{
		Name:  "served",
		Call:  func(context.Context) error { calledAt = monotonic(); return nil },
		After: func(context.Context) error { afterAt = monotonic(); return nil },
		Shown: "curl …",
	}
	s, err := v.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !(s.start <= calledAt && calledAt <= s.end) {
		t.Errorf("the call at %v lies outside the span %v–%v", calledAt, s.start, s.end)
	}
	if afterAt < s.end {
		t.Errorf("After ran at %v, before the clock stopped at %v", afterAt, s.end)
	}
	if got := v.Command(); got != "curl …" {
		t.Errorf("Command() = %q, want the shown line", got)
	}

	refill := errors.New("pool short")
	v.After = func(context.Context) error { return refill }
	if _, err := v.run(context.Background()); !errors.Is(err, refill) || !strings.HasPrefix(err.Error(), "served: ") {
		t.Errorf("After's failure: got %v, want it wrapped with the variant's name", err)
	}
	called := errors.New("status refused")
	v.Call = func(context.Context) error { return called }
	v.After = func(context.Context) error { t.Error("After ran after a failed call"); return nil }
	if _, err := v.run(context.Background()); !errors.Is(err, called) {
		t.Errorf("Call's failure: got %v, want %v", err, called)
	}
}

// A command's After runs too, once its clock has stopped, and not after a
// failed run.
func TestCommandVariantAfter(t *testing.T) {
	var afterAt time.Duration
	v := Variant{Name: "cmd", Argv: []string{"/bin/echo", "hello"}, Want: "hello",
		After: func(context.Context) error { afterAt = monotonic(); return nil }}
	s, err := v.run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if afterAt < s.end {
		t.Errorf("After ran at %v, before the clock stopped at %v (or not at all)", afterAt, s.end)
	}
	v.Argv = []string{"/bin/false"}
	v.After = func(context.Context) error { t.Error("After ran after a failed command"); return nil }
	if _, err := v.run(context.Background()); err == nil {
		t.Error("/bin/false: no error")
	}
}
