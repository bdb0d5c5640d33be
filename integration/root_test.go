package integration

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/jail"
)

// TestRootLibraries_OnlyTheProgramsOwn lists the job's library directories
// from inside: they hold exactly the libraries the program loads, none of
// the host's others, whether they are bound one by one or (a state
// directory on their file system) as a tree of links to them.
func TestRootLibraries_OnlyTheProgramsOwn(t *testing.T) {
	const ls = "/bin/ls"
	libs, err := jail.SharedLibraries(ls)
	if err != nil {
		t.Fatal(err)
	}
	dirs := map[string][]string{}
	for _, lib := range libs {
		dirs[filepath.Dir(lib)] = append(dirs[filepath.Dir(lib)], filepath.Base(lib))
	}
	for dir, want := range dirs {
		inv := pmjailCmd(t, "", "exec", "--json", "--", ls, "-1A", dir)
		if inv.Result == nil || inv.Result.Status != "ok" {
			t.Fatalf("ls %s: exit %d %s %s", dir, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
		got := strings.Fields(inv.Result.Stdout)
		slices.Sort(got)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("the job's %s holds %v, want %s's libraries %v", dir, got, ls, want)
		}
	}
	// An operator's bind under one of those directories needs a mount point
	// in it: the libraries are then bound one by one, and the bind works.
	src := t.TempDir()
	// Readable by the job's unprivileged ids, as a bind's source must be.
	for _, d := range []string{src, filepath.Dir(src)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(src, "tool.txt"), "x")
	under := filepath.Join(filepath.Dir(libs[0]), "pmjail-test-bind")
	inv := pmjailCmd(t, "", "exec", "--json", "--ro-bind", src+":"+under, "--", ls, under)
	if inv.Result == nil || inv.Result.Status != "ok" || strings.TrimSpace(inv.Result.Stdout) != "tool.txt" {
		t.Errorf("a bind at %s: exit %d %s %s", under, inv.ExitCode, inv.Stdout, inv.Stderr)
	}

	// The default state directory sits beside node_modules in the checkout.
	// Where it shares the libraries' file system, the tree must be used.
	state := filepath.Join(repoRoot, ".cache", "pmjail")
	st, errState := os.Stat(state)
	lib, errLib := os.Stat(libs[0])
	if errState != nil || errLib != nil {
		t.Fatalf("state %v, library %v", errState, errLib)
	}
	if st.Sys().(*syscall.Stat_t).Dev != lib.Sys().(*syscall.Stat_t).Dev {
		t.Logf("%s is on another file system than %s: the libraries are bound one by one", state, libs[0])
		return
	}
	trees, _ := filepath.Glob(filepath.Join(state, "libs", "*", libs[0]))
	var linked bool
	for _, tree := range trees {
		if a, err := os.Stat(tree); err == nil && os.SameFile(a, lib) {
			linked = true
		}
	}
	if !linked {
		t.Errorf("no tree of links to %s under %s", libs[0], state)
	}
}
