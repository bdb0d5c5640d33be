package job

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/runtimes"
)

// benchInstall locates the pinned runtimes for the benchmarks: from
// $PMJAIL_RUNTIME_DIR, else the checkout's node_modules. Without them the
// benchmark skips, except under CI=true where that is a failure.
func benchInstall(b *testing.B) *runtimes.Install {
	b.Helper()
	if os.Getenv(runtimes.EnvRuntimeDir) == "" {
		dir, err := filepath.Abs(filepath.Join("..", "node_modules"))
		if err != nil {
			b.Fatal(err)
		}
		b.Setenv(runtimes.EnvRuntimeDir, dir)
	}
	in, err := runtimes.Locate()
	if err != nil {
		testenv.SkipOrFail(b, "runtimes not installed (run `make setup`): %v", err)
	}
	return in
}

var helloRequest = Request{Runtime: "deno", Source: `console.log("hello")`}

// BenchmarkResolveDenoSpec measures what the supervisor does for every
// Deno job before it forks: resolve the request against the profile and
// the ceiling, describe the launch, and build the OCI spec (which reads
// the Deno binary's ELF headers for the libraries to bind).
func BenchmarkResolveDenoSpec(b *testing.B) {
	in := benchInstall(b)
	rn := &Runner{Install: in, Ceiling: DefaultCeiling()}
	ceil := DefaultCeiling()

	b.Run("resolve", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := helloRequest
			if _, err := Resolve(&req, ceil, false); err != nil {
				b.Fatal(err)
			}
		}
	})

	req := helloRequest
	r, err := Resolve(&req, ceil, false)
	if err != nil {
		b.Fatal(err)
	}
	lim := rootfs.Limits{TmpBytes: int64(r.Limits.Tmp), OpenFiles: 1024, FileBytes: uint64(r.Limits.Tmp), CPUSeconds: 12}
	b.Run("spec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			l, err := rn.launch(r)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rootfs.NewSpec(l, lim); err != nil {
				b.Fatal(err)
			}
		}
	})

	b.Run("resolve+spec", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := helloRequest
			r, err := Resolve(&req, ceil, false)
			if err != nil {
				b.Fatal(err)
			}
			l, err := rn.launch(r)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := rootfs.NewSpec(l, lim); err != nil {
				b.Fatal(err)
			}
		}
	})
}
