package buildinfo

import (
	"runtime/debug"
	"testing"
)

func TestVersion(t *testing.T) {
	vcs := []debug.BuildSetting{{Key: "vcs.revision", Value: "4dc7747c0ffee0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}
	for _, tc := range []struct {
		name  string
		stamp string
		info  *debug.BuildInfo
		want  string
	}{
		{"stamped", "v1.2.0-3-g4dc7747-dirty", &debug.BuildInfo{Main: debug.Module{Version: "v1.1.0"}}, "v1.2.0-3-g4dc7747-dirty"},
		{"go install of a release", "", &debug.BuildInfo{Main: debug.Module{Version: "v1.1.0"}}, "v1.1.0"},
		{"a checkout's pseudo-version", "", &debug.BuildInfo{Main: debug.Module{Version: "v0.0.0-20261127173250-4dc7747c0ffe+dirty"}, Settings: vcs}, "v0.0.0-20261127173250-4dc7747c0ffe+dirty"},
		{"devel with a commit", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: vcs}, "4dc7747c0ffe-dirty"},
		{"devel", "", &debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, "dev"},
		{"no build info", "", nil, "dev"},
	} {
		if got := version(tc.stamp, tc.info); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
}
