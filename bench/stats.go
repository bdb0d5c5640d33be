package main

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Summary is the distribution of one variant's timings.
type Summary struct {
	N                int
	Median, Min, Max time.Duration
	P50, P99         time.Duration
}

// Summarize sorts a copy of samples and returns its order statistics; an
// empty slice gives the zero Summary.
func Summarize(samples []time.Duration) Summary {
	if len(samples) == 0 {
		return Summary{}
	}
	s := slices.Clone(samples)
	slices.Sort(s)
	return Summary{
		N:      len(s),
		Median: median(s),
		Min:    s[0],
		Max:    s[len(s)-1],
		P50:    percentile(s, 50),
		P99:    percentile(s, 99),
	}
}

// median of sorted s: the mean of the two middle values for an even count.
func median(s []time.Duration) time.Duration {
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// percentile of sorted s by the nearest-rank method: the smallest value
// with at least p% of the samples at or below it.
func percentile(s []time.Duration, p float64) time.Duration {
	rank := int(math.Ceil(p / 100 * float64(len(s))))
	if rank < 1 {
		rank = 1
	}
	return s[rank-1]
}

// Ratio is a/b, or NaN when b is zero.
func Ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// ms formats d in milliseconds with a precision that suits its size.
func ms(d time.Duration) string {
	v := float64(d) / float64(time.Millisecond)
	switch {
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	default:
		return fmt.Sprintf("%.2f ms", v)
	}
}

// percentBelow and percentAbove format a ratio as a percentage to a tenth,
// rounded away from the target's side: a ratio of 0.8497 against "≥ 85%"
// reads 84.9%, never a 85% marked not met.
// (The 1e-9 keeps a ratio that is a tenth exactly, such as 0.85, whose
// float product with 1000 falls a hair short, on its own tenth.)
func percentBelow(r float64) string { return fmt.Sprintf("%.1f%%", math.Floor(r*1000+1e-9)/10) }
func percentAbove(r float64) string { return fmt.Sprintf("%.1f%%", math.Ceil(r*1000-1e-9)/10) }

// ratioAbove formats a ratio held to a ceiling ("≤ 1.15×") to a hundredth,
// rounded up for the same reason: 1.1512 reads 1.16×, never a 1.15× marked
// not met.
func ratioAbove(r float64) string { return fmt.Sprintf("%.2f×", math.Ceil(r*100-1e-9)/100) }

// spread is "min–max" in milliseconds.
func spread(s Summary) string {
	return ms(s.Min) + " – " + ms(s.Max)
}
