package main

import (
	"testing"

	"github.com/pmjail/pmjail/jail"
)

// TestExitCode pins the CLI's exit codes (README, "Exit codes") now that
// the status-derived ones come from jail.Status.ExitCode.
func TestExitCode(t *testing.T) {
	for _, tc := range []struct {
		status jail.Status
		code   int // the result's exit_code
		want   int
	}{
		{jail.StatusOK, 0, 0},
		{jail.StatusError, 3, 3},
		{jail.StatusError, 1, 1},
		{jail.StatusTimeout, 124, 124},
		{jail.StatusCPULimit, 124, 124},
		{jail.StatusOutputLimit, 0, 124},
		{jail.StatusMemoryLimit, 137, 137},
		{jail.StatusMemoryLimit, 0, 137},
		{jail.StatusRefused, 125, 125},
		{jail.StatusProtocolError, 125, 125},
		{jail.StatusInternalError, 125, 125},
		{jail.StatusCancelled, 125, 125},
		{jail.StatusCancelled, 0, 125},
		{jail.StatusInternalError, 1, 125},
		{jail.StatusInternalError, 126, 126},
		{jail.StatusInternalError, 127, 127},
		{jail.StatusRefused, 127, 127}, // exec: the program was not found
		{jail.StatusRefused, 126, 126}, // exec: not a program the jail can run
		{jail.StatusRefused, 1, 125},
		{jail.Status("bogus"), 0, 125},
	} {
		if got := exitCode(&jail.Result{Status: tc.status, ExitCode: tc.code}); got != tc.want {
			t.Errorf("exitCode(%s, exit_code %d) = %d, want %d", tc.status, tc.code, got, tc.want)
		}
	}
}
