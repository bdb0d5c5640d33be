package runtimes

import (
	"os"
	"sort"
	"testing"
	"time"
)

// TestPythonMeasure reports wall time, peak RSS and threads of a Python
// hello, cold and from the snapshot. It asserts nothing a slow machine
// would fail; it runs only when PMJAIL_MEASURE=1.
func TestPythonMeasure(t *testing.T) {
	if os.Getenv("PMJAIL_MEASURE") != "1" {
		t.Skip("set PMJAIL_MEASURE=1 to measure")
	}
	cold := testInstall(t, t.TempDir())
	for _, c := range []struct {
		name string
		in   *Install
		runs int
	}{{"snapshot", snapshotInstall(t), 7}, {"cold", cold, 3}} {
		var walls []time.Duration
		var rss int64
		threads := 0
		for i := 0; i < c.runs; i++ {
			l, err := c.in.Launch(Job{Runtime: Python, Source: []byte("print('hello')\n"), MemoryBytes: 512 << 20})
			if err != nil {
				t.Fatal(err)
			}
			r := runBwrap(t, l, nil, nil)
			if r.Exit != 0 || r.Stdout != "hello\n" {
				t.Fatalf("%s run: exit %d stdout %q stderr %s", c.name, r.Exit, r.Stdout, r.Stderr)
			}
			walls = append(walls, r.Wall)
			rss = max(rss, r.MaxRSSKiB)
			threads = max(threads, r.MaxThreads)
		}
		sort.Slice(walls, func(i, j int) bool { return walls[i] < walls[j] })
		t.Logf("%s hello: median %v (min %v, max %v) over %d runs; peak RSS %d KiB; max threads %d",
			c.name, walls[len(walls)/2], walls[0], walls[len(walls)-1], c.runs, rss, threads)
	}
}
