//go:build cgo

package seccomp_test

import (
	"context"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/seccomp"
)

// BenchmarkCompileDeno is what a CLI run pays to turn the Deno policy into
// BPF (a daemon compiles each profile once).
func BenchmarkCompileDeno(b *testing.B) {
	p, err := profiles.Seccomp("deno")
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := seccomp.Compile(p, seccomp.Options{Notify: true}); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkInstallDeno is what the init stage pays to install the Deno
// filter, in libseccomp's list layout and in the tree layout pmjail uses,
// timed in a throwaway child around bpf.Install (install-ns/op; ns/op is
// the child's whole start).
func BenchmarkInstallDeno(b *testing.B) {
	testenv.RequireRoot(b) // the child installs a filter with a notification listener
	p, err := profiles.Seccomp("deno")
	if err != nil {
		b.Fatal(err)
	}
	for _, layout := range []struct {
		name string
		tree bool
	}{{"list", false}, {"tree", true}} {
		undo := seccomp.SetTreeLayout(layout.tree)
		prog, err := seccomp.Compile(p, seccomp.Options{Notify: true})
		undo()
		if err != nil {
			b.Fatal(err)
		}
		b.Run(layout.name, func(b *testing.B) {
			var total int64
			for b.Loop() {
				c := startChild(b, context.Background(), "install", prog, nil)
				ns, err := strconv.ParseInt(c.wait(b)["install_ns"], 10, 64)
				if err != nil {
					b.Fatal(err)
				}
				unix.Close(c.listener)
				total += ns
			}
			b.ReportMetric(float64(total)/float64(b.N), "install-ns/op")
		})
	}
}
