package main

import (
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/pmjail/pmjail/runtimes"
)

// packages add says what to write for an argument that is neither an npm
// reference nor a package file: it called "zod@3.23.8" a file of no known
// kind, and "py:greet@1.0" too.
func TestPackagesAddArg(t *testing.T) {
	modules, err := filepath.Abs("../../node_modules")
	if err != nil {
		t.Fatal(err)
	}
	// Locate needs a node_modules holding Deno; the store is this test's.
	t.Setenv(runtimes.EnvRuntimeDir, modules)
	t.Setenv("PMJAIL_PACKAGES_DIR", filepath.Join(t.TempDir(), "store"))
	if _, err := runtimes.Locate(); err != nil {
		t.Skipf("no runtimes to locate: %v", err)
	}
	for a, want := range map[string]string{
		"zod@3.23.8":   "pmjail: packages add: zod@3.23.8: want npm:NAME@X.Y.Z from the registry, or the file of an npm tarball (.tgz) or a wheel (.whl)\n",
		"py:greet@1.0": "pmjail: packages add: py:greet@1.0: a wheel is added from its file (NAME-VERSION-py3-none-any.whl): only npm packages are fetched (npm:NAME@X.Y.Z)\n",
	} {
		code, stderr := captureStderr(t, func() int { return cmdPackages([]string{"add", a}) })
		if code != exitFailure || stderr != want {
			t.Errorf("packages add %s: exit %d, %q; want %q", a, code, stderr, want)
		}
	}
}

// captureStderr runs f with os.Stderr a pipe, and returns what it wrote.
func captureStderr(t *testing.T, f func() int) (int, string) {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	saved := os.Stderr
	os.Stderr = w
	code := f()
	os.Stderr = saved
	w.Close()
	out, err := io.ReadAll(r)
	r.Close()
	if err != nil {
		t.Fatal(err)
	}
	return code, string(out)
}
