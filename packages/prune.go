package packages

import (
	"os"
	"path/filepath"
	"strings"
	"time"
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
		ents, err := os.ReadDir(w.dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if !e.IsDir() || !strings.HasPrefix(e.Name(), w.prefix) {
				continue
			}
			path := filepath.Join(w.dir, e.Name())
			st, err := os.Lstat(path)
			if err != nil || !st.IsDir() || now.Sub(st.ModTime()) < abandonedWorkAge {
				continue
			}
			if removeSealed(path) == nil {
				removed = append(removed, path)
			}
		}
	}
	return removed
}
