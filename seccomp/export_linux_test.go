//go:build cgo

package seccomp

// SetTreeLayout switches Compile's filter layout for a test and returns
// the undo.
func SetTreeLayout(on bool) (undo func()) {
	was := treeLayout
	treeLayout = on
	return func() { treeLayout = was }
}
