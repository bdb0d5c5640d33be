package runtimes

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pmjail/pmjail/internal/sweep"
)

// buildPrefixes start the names of the work directories that builds make
// in the state directory (warmInJail's, EnsurePyodideSnapshot's). A build
// removes its own when it ends; one whose process was killed mid-build (a
// daemon or `pmjail prepare` SIGKILLed while it starts) cannot, and each
// such directory keeps a few MB.
var buildPrefixes = []string{".deno-cache-build-", ".snapshot-build-"}

// abandonedBuildAge is how old a build's work directory must be before
// PruneBuilds takes it for one a killed build left: each build is bounded
// by its timeout (denoCacheBuildTimeout, snapshotBuildTimeout), and a
// younger one may be another process's build under way.
const abandonedBuildAge = time.Hour

// PruneBuilds removes the work directories that builds killed before
// their end left in the state directory, those abandonedBuildAge old
// (modified before now less that), and returns them. `pmjail prepare`
// (through Prune) and the daemon's start call it.
func (in *Install) PruneBuilds(now time.Time) []string {
	root, err := os.OpenRoot(in.StateDir)
	if err != nil {
		return nil
	}
	defer root.Close()
	var removed []string
	for _, name := range sweep.Dir(root, func(name string, st fs.FileInfo) bool {
		return hasBuildPrefix(name) && now.Sub(st.ModTime()) >= abandonedBuildAge
	}, nil) {
		removed = append(removed, filepath.Join(in.StateDir, name))
	}
	return removed
}

func hasBuildPrefix(name string) bool {
	for _, p := range buildPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
