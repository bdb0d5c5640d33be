package runtimes

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
)

// testInstall is the repository's own runtime install with its state in a
// temporary directory, so tests never touch the real snapshot.
func testInstall(t testing.TB, stateDir string) *Install {
	t.Helper()
	modules, err := filepath.Abs("../node_modules")
	if err != nil {
		t.Fatal(err)
	}
	deno := filepath.Join(modules, "@deno", "linux-x64-glibc", "deno")
	_, err = os.Stat(deno)
	testenv.Need(t, err == nil, "the pinned deno and pyodide (run `make setup`)")
	return &Install{
		ModulesDir: modules,
		DenoPath:   deno,
		PyodideDir: filepath.Join(modules, "pyodide"),
		StateDir:   stateDir,
	}
}

var shared struct {
	once sync.Once
	dir  string
	err  error
}

// snapshotInstall is an install with a built snapshot, shared by the tests
// of one `go test` run (building one takes ~5 s).
func snapshotInstall(t testing.TB) *Install {
	t.Helper()
	shared.once.Do(func() {
		shared.dir, shared.err = os.MkdirTemp("", "runtimes-test-")
		if shared.err != nil {
			return
		}
		_, shared.err = testInstall(t, shared.dir).EnsurePyodideSnapshot(context.Background())
	})
	if shared.err != nil {
		t.Fatalf("build snapshot: %v", shared.err)
	}
	return testInstall(t, shared.dir)
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
