package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
)

// goBenchPackages hold the hot-path benchmarks: spec resolution (job),
// framing and broker dispatch (ipc), the init stage's configuration
// (jail/initstage), the seccomp filter's compile and install (seccomp).
var goBenchPackages = []string{"./job/", "./ipc/", "./jail/initstage/", "./seccomp/"}

// GoBench is one line of `go test -bench` output.
type GoBench struct {
	Pkg, Name         string
	NsOp              float64
	BytesOp, AllocsOp string
	// Other holds a benchmark's own metrics ("103919 install-ns/op").
	Other []string
}

func (b *Bench) goBench(ctx context.Context) error {
	b.Report.Section("Go benchmarks (hot paths)")
	var rows [][]string
	var cmds []string
	for _, pkg := range goBenchPackages {
		argv := []string{"go", "test", "-run", "^$", "-bench", ".", "-benchmem", "-count", "1", pkg}
		cmds = append(cmds, strings.Join(argv, " "))
		cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
		cmd.Dir = b.Root
		out, err := cmd.CombinedOutput()
		if err != nil {
			b.Report.Note("go test -bench %s failed: %v", pkg, err)
			rows = append(rows, []string{pkg, "failed: " + strings.ReplaceAll(tail(string(out)), "\n", " "), "", "", "", ""})
			continue
		}
		for _, r := range parseGoBench(strings.Trim(pkg, "./"), string(out)) {
			rows = append(rows, []string{r.Pkg, r.Name, nsop(r.NsOp), r.BytesOp, r.AllocsOp, strings.Join(r.Other, ", ")})
		}
	}
	b.Report.Table([]string{"package", "benchmark", "time/op", "B/op", "allocs/op", "other"}, rows)
	b.Report.Commands(cmds...)
	return nil
}

func nsop(ns float64) string {
	switch {
	case ns >= 1e6:
		return fmt.Sprintf("%.2f ms", ns/1e6)
	case ns >= 1e3:
		return fmt.Sprintf("%.1f µs", ns/1e3)
	}
	return fmt.Sprintf("%.0f ns", ns)
}

// parseGoBench reads the result lines of `go test -bench -benchmem`.
func parseGoBench(pkg, out string) []GoBench {
	var rows []GoBench
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		ns, err := strconv.ParseFloat(f[2], 64)
		if err != nil {
			continue
		}
		r := GoBench{Pkg: pkg, Name: f[0], NsOp: ns}
		for i := 4; i+1 < len(f); i += 2 {
			switch f[i+1] {
			case "B/op":
				r.BytesOp = f[i]
			case "allocs/op":
				r.AllocsOp = f[i]
			default:
				r.Other = append(r.Other, f[i]+" "+f[i+1])
			}
		}
		rows = append(rows, r)
	}
	return rows
}
