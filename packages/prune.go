package packages

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pmjail/pmjail/internal/sweep"
)

// abandonedWorkAge is how old a work directory of the store must be
// before PruneWork takes it for one a killed process left: an add or a
// view's build under way is far younger.
const abandonedWorkAge = time.Hour

// PruneWork removes the work directories that a `pmjail packages add`
// (.add-*) or a view's build (views/.build-*, a run's) killed mid-way
// left in the store, those abandonedWorkAge old (modified before now less
// that), and returns them. Each removes its own when it ends; nothing
// else did, and an add's holds the package unpacked so far. An add, `pmjail
// prepare` and the daemon's start call it.
func (s *Store) PruneWork(now time.Time) []string {
	var removed []string
	for _, w := range []struct{ dir, prefix string }{{s.Dir, ".add-"}, {filepath.Join(s.Dir, "views"), ".build-"}} {
		root, err := os.OpenRoot(w.dir)
		if err != nil {
			continue
		}
		for _, name := range sweep.Dir(root, func(name string, st fs.FileInfo) bool {
			return strings.HasPrefix(name, w.prefix) && now.Sub(st.ModTime()) >= abandonedWorkAge
		}, func(name string) error {
			// Sealed: its directories are read-only.
			return removeSealed(filepath.Join(w.dir, name))
		}) {
			removed = append(removed, filepath.Join(w.dir, name))
		}
		root.Close()
	}
	return removed
}
