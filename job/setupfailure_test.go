package job

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/initstage"
)

// TestSetupLayerFailure: a run is retried on a probed host only when the
// step that failed applies a layer, or the host refused the namespaces or
// the run's cgroup; a failure of the job's own making is not.
func TestSetupLayerFailure(t *testing.T) {
	for _, tc := range []struct {
		name string
		out  jail.Outcome
		want bool
	}{
		{"root", jail.Outcome{InitStage: initstage.StageRoot, InitLayer: initstage.LayerRootfs}, true},
		{"seccomp", jail.Outcome{InitStage: initstage.StageSeccomp, InitLayer: initstage.LayerSeccomp}, true},
		{"start", jail.Outcome{InitStage: initstage.StageStart, Err: errors.New("clone3: operation not permitted")}, true},
		{"cgroup not supported", jail.Outcome{InitStage: initstage.StageCgroup, Err: fmt.Errorf("create cgroup: %w", cgroup.ErrNotSupported)}, true},
		{"cgroup join", jail.Outcome{InitStage: initstage.StageCgroup, Err: errors.New("send join: broken pipe")}, false},
		{"bind source", jail.Outcome{InitStage: initstage.StageBindSource}, false},
		{"files", jail.Outcome{InitStage: initstage.StageFiles}, false},
		{"host mount namespace", jail.Outcome{InitStage: initstage.StageHostMountNS, Err: errors.New("stat /proc/self/ns/mnt")}, false},
		{"exec", jail.Outcome{InitStage: initstage.StageExec}, false},
	} {
		if got := setupLayerFailure(&tc.out); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
