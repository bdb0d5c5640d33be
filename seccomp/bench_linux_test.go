package seccomp_test

import (
	"testing"

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
