// Package testenv is what the test suites share about the host they run
// on: when a test may skip for a feature the host lacks, and root.
//
// CI=true says the host was set up to have every feature the suites test
// (CI runs as root on a kernel with every layer), so there a missing
// feature is a failure: a suite that skips what it cannot run would pass
// without testing anything.
package testenv

import (
	"fmt"
	"os"
	"testing"
)

// CI reports whether the suites run under CI=true.
func CI() bool { return os.Getenv("CI") == "true" }

// SkipOrFail skips t for what the message says the host lacks, or fails
// it under CI=true.
func SkipOrFail(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if CI() {
		t.Fatalf("%s (CI=true: a skip is a failure)", msg)
	}
	t.Skip(msg)
}

// Need skips or fails t unless ok: the host has feature.
func Need(t testing.TB, ok bool, feature string) {
	t.Helper()
	if !ok {
		SkipOrFail(t, "host lacks %s", feature)
	}
}

// RequireRoot skips or fails t unless it runs as root, which the tests
// that create namespaces, cgroups and mounts, or give files away, need.
func RequireRoot(t testing.TB) {
	t.Helper()
	Need(t, os.Geteuid() == 0, "root (euid "+fmt.Sprint(os.Geteuid())+")")
}
