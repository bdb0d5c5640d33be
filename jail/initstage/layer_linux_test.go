package initstage_test

import (
	"slices"
	"testing"

	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/posture"
)

// TestStepLayersArePostureLayers: the layer a step names is one posture
// reports, spelled alike: the caller probes the host for it and runs
// without it.
func TestStepLayersArePostureLayers(t *testing.T) {
	for i, l := range initstage.StepLayers() {
		if l != "" && !slices.Contains(posture.Names, string(l)) {
			t.Errorf("step %d names layer %q, which posture does not know", i, l)
		}
	}
}
