package job

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/posture"
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

// TestInitLayersArePostureLayers: the layer an init stage step names is
// one posture reports, spelled alike: the host is probed for it, and a run
// on the probed host goes without it.
func TestInitLayersArePostureLayers(t *testing.T) {
	layers := initstage.Layers()
	if len(layers) == 0 {
		t.Fatal("no step applies a layer")
	}
	for _, l := range layers {
		if !slices.Contains(posture.Names, string(l)) {
			t.Errorf("an init stage step names layer %q, which posture does not know", l)
		}
	}
}
