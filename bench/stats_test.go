package main

import (
	"math"
	"slices"
	"testing"
	"time"
)

func TestSummarize(t *testing.T) {
	odd := Summarize([]time.Duration{5, 1, 4, 2, 3})
	if odd.Median != 3 || odd.Min != 1 || odd.Max != 5 || odd.N != 5 {
		t.Errorf("odd: got %+v, want median 3 min 1 max 5 n 5", odd)
	}
	even := Summarize([]time.Duration{4, 1, 3, 2})
	if even.Median != 2 { // (2+3)/2 in integer nanoseconds
		t.Errorf("even: median %v, want 2", even.Median)
	}
	var hundred []time.Duration
	for i := 100; i >= 1; i-- {
		hundred = append(hundred, time.Duration(i))
	}
	h := Summarize(hundred)
	if h.P50 != 50 || h.P99 != 99 {
		t.Errorf("1..100: p50 %v p99 %v, want 50 and 99", h.P50, h.P99)
	}
	if z := Summarize(nil); z.N != 0 {
		t.Errorf("empty: got %+v", z)
	}
}

func TestSummarizeLeavesInputAlone(t *testing.T) {
	in := []time.Duration{3, 1, 2}
	Summarize(in)
	if in[0] != 3 || in[1] != 1 || in[2] != 2 {
		t.Errorf("input reordered: %v", in)
	}
}

func TestRatio(t *testing.T) {
	if r := Ratio(3, 2); r != 1.5 {
		t.Errorf("Ratio(3,2) = %v", r)
	}
	if r := Ratio(1, 0); !math.IsNaN(r) {
		t.Errorf("Ratio(1,0) = %v, want NaN", r)
	}
}

func TestParseGoBench(t *testing.T) {
	out := "goos: linux\nBenchmarkResolveDenoSpec/resolve-2   \t  123456\t      9876 ns/op\t    4096 B/op\t      52 allocs/op\nPASS\nok  \tgithub.com/pmjail/pmjail/job\t3.2s\n"
	got := parseGoBench("job", out)
	if len(got) != 1 {
		t.Fatalf("parsed %d rows, want 1: %+v", len(got), got)
	}
	r := got[0]
	if r.Name != "BenchmarkResolveDenoSpec/resolve-2" || r.NsOp != 9876 || r.BytesOp != "4096" || r.AllocsOp != "52" || r.Pkg != "job" || len(r.Other) != 0 {
		t.Errorf("parsed %+v", r)
	}
	out = "BenchmarkInstallDeno/tree-2   \t     200\t   2888452 ns/op\t    103919 install-ns/op\t   18041 B/op\t     101 allocs/op\n"
	got = parseGoBench("seccomp", out)
	if len(got) != 1 || got[0].NsOp != 2888452 || got[0].BytesOp != "18041" || !slices.Equal(got[0].Other, []string{"103919 install-ns/op"}) {
		t.Errorf("parsed %+v, want the install-ns/op metric kept", got)
	}
}

func TestPercentRoundsAwayFromTheTarget(t *testing.T) {
	for _, tc := range []struct {
		r            float64
		below, above string
	}{
		{0.8497, "84.9%", "85.0%"},
		{0.85, "85.0%", "85.0%"},
		{0.15, "15.0%", "15.0%"},
		{0.1504, "15.0%", "15.1%"},
		{0.9, "90.0%", "90.0%"},
	} {
		if got := percentBelow(tc.r); got != tc.below {
			t.Errorf("percentBelow(%v) = %s, want %s", tc.r, got, tc.below)
		}
		if got := percentAbove(tc.r); got != tc.above {
			t.Errorf("percentAbove(%v) = %s, want %s", tc.r, got, tc.above)
		}
	}
}

func TestRatioRoundsAwayFromTheCeiling(t *testing.T) {
	for r, want := range map[float64]string{1.1512: "1.16×", 1.15: "1.15×", 1.149: "1.15×", 1.4: "1.40×"} {
		if got := ratioAbove(r); got != want {
			t.Errorf("ratioAbove(%v) = %s, want %s", r, got, want)
		}
	}
}
