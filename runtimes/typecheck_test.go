package runtimes

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTypeErrors reads Deno's report of a failed type check (as Deno
// 2.9.6 writes it with --quiet and NO_COLOR) and nothing else.
func TestTypeErrors(t *testing.T) {
	two := "TS2322 [ERROR]: Type 'string' is not assignable to type 'number'.\nconst n: number = \"s\";\n      ^\n    at file:///job/main.ts:1:7\n\n" +
		"TS2322 [ERROR]: Type 'number' is not assignable to type 'string'.\nconst m: string = 1;\n      ^\n    at file:///job/main.ts:2:7\n\nFound 2 errors.\n\n" +
		"error: Type checking failed.\n\n  info: The program failed type-checking, but it still might work correctly.\n"
	msg, report, ok := TypeErrors(two)
	if !ok || msg != "Type 'string' is not assignable to type 'number'. at file:///job/main.ts:1:7 (and 1 more)" {
		t.Errorf("two errors: %v %q", ok, msg)
	}
	if want := two[:len("TS2322")]; report[:len(want)] != want || report[len(report)-len("Found 2 errors."):] != "Found 2 errors." {
		t.Errorf("report %q", report)
	}
	for _, stderr := range []string{
		"",
		"error: Uncaught Error: x\n",
		"hello\nerror: Type checking failed.\n",
		"TS but not a report",
	} {
		if _, _, ok := TypeErrors(stderr); ok {
			t.Errorf("%q read as a type-check report", stderr)
		}
	}
}

// TestUnsettledAwait reads Deno's report of a top-level await that can
// never settle, when it is about the job's own code.
func TestUnsettledAwait(t *testing.T) {
	stderr := "partial output\nerror: Top-level await promise never resolved\nawait new Promise(() => {})\n^\n    at <anonymous> (file:///job/main.js:3:1)\n"
	msg, report, ok := UnsettledAwait(stderr)
	if !ok || msg != "the script's top-level await never settled at file:///job/main.js:3:1: nothing (no timer, I/O or broker call) was left to settle it" {
		t.Errorf("%v %q", ok, msg)
	}
	if report != "Top-level await promise never resolved\nawait new Promise(() => {})\n^\n    at <anonymous> (file:///job/main.js:3:1)" {
		t.Errorf("report %q", report)
	}
	for _, s := range []string{"", "error: Uncaught Error\n", "error: Top-level await promise never resolved\n    at <anonymous> (file:///pmjail/bootstrap.js:9:1)\n"} {
		if _, _, ok := UnsettledAwait(s); ok {
			t.Errorf("%q read as the job's unsettled await", s)
		}
	}
}

// TestReportsFromStderrBounded: stderr is the guest's to write, and a
// report forged in it is copied into the result's error besides the
// stderr itself: the message and report taken are cut, at a character,
// however long the lines they come from.
func TestReportsFromStderrBounded(t *testing.T) {
	long := strings.Repeat("é<", 4<<20)
	for name, read := range map[string]func() (string, string, bool){
		"type check": func() (string, string, bool) {
			return TypeErrors("TS1 [ERROR]: " + long + "\n    at file:///job/main.ts:1:1 " + long + "\nerror: Type checking failed.\n")
		},
		"unsettled await": func() (string, string, bool) {
			return UnsettledAwait("error: Top-level await promise never resolved\n    at file:///job/main.js:1:1 " + long + "\n" + long)
		},
	} {
		msg, report, ok := read()
		if !ok {
			t.Errorf("%s: the forged report not read", name)
			continue
		}
		if len(msg) > maxReportMessage+128 || len(report) > maxReport+len("…[truncated]") || !utf8.ValidString(msg) || !utf8.ValidString(report) || !strings.HasSuffix(report, "…[truncated]") {
			t.Errorf("%s: a message of %d bytes and a report of %d (valid UTF-8: %v, %v), want them cut to %d and %d", name, len(msg), len(report), utf8.ValidString(msg), utf8.ValidString(report), maxReportMessage, maxReport)
		}
	}
}
