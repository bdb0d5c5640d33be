package main

import "testing"

// `pmjail runs --help` lists the command's flags, as every command's
// --help does, rather than failing for want of a run id.
func TestRunsHelp(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"get", "--help"}} {
		if code := cmdRuns(args); code != 0 {
			t.Errorf("runs %v: exit %d, want 0 and the usage", args, code)
		}
	}
}
