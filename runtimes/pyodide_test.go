package runtimes

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/initstage"
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
		Warmer:     testWarmer,
	}
}

// openStateDir is a fresh state directory the jail's ids can pass
// through, as a real one (made 0755 below the runtime directory) is.
func openStateDir(t testing.TB) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "runtimes-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
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
		// The jail's ids open what a run binds from it, as in a real one.
		if shared.err = os.Chmod(shared.dir, 0o755); shared.err != nil {
			return
		}
		_, shared.err = testInstall(t, shared.dir).EnsurePyodideSnapshot(context.Background())
	})
	if shared.err != nil {
		t.Fatalf("build snapshot: %v", shared.err)
	}
	return testInstall(t, shared.dir)
}

// TestMain lets the test binary serve as the init stage of the jail the
// caches are warmed in, as pmjail's binary does.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == initstage.Role {
		initstage.Main()
	}
	code := m.Run()
	if shared.dir != "" {
		os.RemoveAll(shared.dir)
	}
	os.Exit(code)
}
