package main

import (
	"fmt"
	"strings"
	"time"
)

// render assembles BENCHMARKS.md: what it is, how to read it, the machine,
// the targets with verdicts, then every section's tables.
func (b *Bench) render(took time.Duration) string {
	var d strings.Builder
	d.WriteString("# pmjail benchmarks\n\n")
	fmt.Fprintf(&d, "Written by `make bench` (`go run ./bench`) on %s in %s. Re-run it to reproduce; `make soak` runs the long soak.\n\n",
		time.Now().UTC().Format("2006-01-02 15:04 UTC"), took.Round(time.Second))
	d.WriteString(`## How to read this

- Ratios are the headline: each table gives every variant's median and its
  ratio to a baseline measured in the same run. Absolute times depend on the
  machine and are secondary.
- Every comparison is interleaved: the variants take turns (A B C, B C A, …)
  so drift and background load hit all sides. Each figure is the median of
  the measured rounds; "min – max" is the spread — a wide spread means a noisy
  machine, so trust the ratio of medians more than any single number.
- Times are wall-clock from fork to exit as seen by the bench, including
  process start-up on both sides.
- Every binary the bench runs (pmjail and its siblings, Deno, bwrap, true)
  is first dropped from the page cache and read back, as an installed
  binary is after a boot: how a file's pages sit in the cache moved one
  freshly built pmjail by ~0.85 ms a run against a byte-identical copy.
- The targets come from the issue; "met" / "not met" is decided mechanically
  from the medians below.

## Machine and versions

`)
	d.WriteString(tableMD([]string{"", ""}, b.hostFacts()))
	d.WriteString("\n## Targets\n\n")
	d.WriteString(tableMD([]string{"target", "measured", "verdict"}, b.Report.targets))
	if len(b.Report.notes) > 0 {
		d.WriteString("\nNotes:\n\n")
		for _, n := range b.Report.notes {
			d.WriteString("- " + n + "\n")
		}
	}
	d.WriteString(b.Report.body.String())
	return d.String()
}
