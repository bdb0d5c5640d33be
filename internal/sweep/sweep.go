// Package sweep removes what pmjail's killed processes left in a
// directory of its state: half-made trees, builds' and adds' work
// directories.
package sweep

import (
	"io/fs"
	"os"
)

// Dir removes each directory of root, the directory opened once, that
// stale says to, and returns their names. Everything goes through root,
// so a path swapped meanwhile is never followed out of it. remove does
// the removing (root.RemoveAll when nil). A listing that fails removes
// nothing.
func Dir(root *os.Root, stale func(name string, st fs.FileInfo) bool, remove func(name string) error) []string {
	if remove == nil {
		remove = root.RemoveAll
	}
	dir, err := root.Open(".")
	if err != nil {
		return nil
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return nil
	}
	var removed []string
	for _, name := range names {
		st, err := root.Lstat(name)
		if err != nil || !st.IsDir() || !stale(name, st) {
			continue
		}
		if remove(name) == nil {
			removed = append(removed, name)
		}
	}
	return removed
}
