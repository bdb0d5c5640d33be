package runtimes

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// A run with packages gets the view read-only at PackagesDir, as DENO_DIR
// (Deno) or as the loader's wheel tree (Python), and read access there
// only; a run without keeps --no-npm and its own DENO_DIR.
func TestLaunchWithPackages(t *testing.T) {
	in := &Install{DenoPath: "/nonexistent/deno", PyodideDir: "/nonexistent/pyodide", StateDir: t.TempDir()}
	view := t.TempDir()
	plain, err := in.Launch(Guest{Runtime: Deno, Source: []byte("1")})
	if err != nil {
		t.Fatal(err)
	}
	l, err := in.Launch(Guest{Runtime: Deno, Source: []byte("1"), Packages: view})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(plain.Args, "--no-npm") || slices.Contains(l.Args, "--no-npm") {
		t.Errorf("--no-npm: plain %v, with packages %v", plain.Args, l.Args)
	}
	if !slices.Contains(l.Args, "--cached-only") || !slices.Contains(l.Args, "--allow-read="+GuestDir+","+JobDir+","+ScratchDir+","+PackagesDir) {
		t.Errorf("args %v", l.Args)
	}
	if !slices.Contains(l.Env, "DENO_DIR="+PackagesDir) || len(l.Copies) != 0 {
		t.Errorf("env %v copies %v", l.Env, l.Copies)
	}
	if !slices.Contains(l.Binds, Bind{Source: view, Target: PackagesDir}) {
		t.Errorf("binds %v", l.Binds)
	}

	// Python: only a view that holds wheels is bound.
	py, err := in.Launch(Guest{Runtime: Python, Source: []byte("1"), Packages: view})
	if err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(py.Binds, func(b Bind) bool { return b.Target == PackagesDir }) || strings.Contains(strings.Join(py.Args, " "), PackagesDir) {
		t.Errorf("a view without wheels: binds %v args %v", py.Binds, py.Args)
	}
	if err := os.Mkdir(filepath.Join(view, "python"), 0o755); err != nil {
		t.Fatal(err)
	}
	py, err = in.Launch(Guest{Runtime: Python, Source: []byte("1"), Packages: view})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(py.Binds, Bind{Source: view, Target: PackagesDir}) || py.Args[len(py.Args)-1] != PackagesDir+"/python" {
		t.Errorf("wheels: binds %v args %v", py.Binds, py.Args)
	}
}
