package testenv

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// skipRoleEnv makes the test binary run the one test below as a child,
// so that its verdict can be read from outside.
const skipRoleEnv = "PMJAIL_TESTENV_CHILD"

func TestSkipOrFailChild(t *testing.T) {
	if os.Getenv(skipRoleEnv) == "" {
		t.Skip("run by TestSkipOrFailHonoursCI")
	}
	Need(t, false, "a feature")
}

// TestSkipOrFailHonoursCI: a missing feature is a skip, and under CI=true
// a failure.
func TestSkipOrFailHonoursCI(t *testing.T) {
	for _, tc := range []struct {
		ci, want string
		fails    bool
	}{
		{"", "--- SKIP: TestSkipOrFailChild", false},
		{"true", "--- FAIL: TestSkipOrFailChild", true},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSkipOrFailChild$", "-test.v")
		cmd.Env = append(os.Environ(), skipRoleEnv+"=1", "CI="+tc.ci)
		out, err := cmd.CombinedOutput()
		if (err != nil) != tc.fails || !strings.Contains(string(out), tc.want) || !strings.Contains(string(out), "host lacks a feature") {
			t.Errorf("CI=%q: %v, want %q naming the feature:\n%s", tc.ci, err, tc.want, out)
		}
	}
}
