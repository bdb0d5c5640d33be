package posture

import (
	"strings"
	"testing"

	"github.com/pmjail/pmjail/jail"
)

// TestJudgeLandlock: the layer is applied only when the probe jail's init
// stage enforced an ABI and the probe role, from inside, was refused what
// only Landlock refuses there.
func TestJudgeLandlock(t *testing.T) {
	for _, tc := range []struct {
		name        string
		abi         int
		reason      string
		write, bind string
		want        State
		detail      string
	}{
		{"applied", 2, "", "EACCES", "ok", Applied, "ABI 2: "},
		{"applied with network rules", 6, "", "EACCES", "EACCES", Applied, "ABI 6: "},
		{"not stacked", 0, "landlock restrict: E2BIG", "ok", "ok", Missing, "did not apply: landlock restrict"},
		{"no report", 0, "", "ok", "ok", Missing, "reported no ruleset"},
		{"enforced but writes pass", 3, "", "ok", "ok", Missing, "/proc/self/comm for writing gave ok"},
		{"enforced but binds pass", 4, "", "EACCES", "ok", Missing, "TCP bind gave ok"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got Layer
			set := func(name string, st State, detail string) { got = Layer{Name: name, State: st, Detail: detail} }
			judgeLandlock(set, &insideReport{LandlockWrite: tc.write, LandlockBind: tc.bind}, &jail.Outcome{Landlock: tc.abi, LandlockReason: tc.reason})
			if got.Name != Landlock || got.State != tc.want || !strings.Contains(got.Detail, tc.detail) {
				t.Errorf("got %+v, want %s with %q in the detail", got, tc.want, tc.detail)
			}
		})
	}
}
