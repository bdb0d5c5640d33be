package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written as a number of bytes or as "64M", "1G",
// "10K" (binary multiples).
type Size int64

// spaces are the white space a size or a duration may have around it:
// those every regular-expression engine's \s matches (RE2's, which Go
// schema checkers use, matches no other), as the OpenAPI document's
// patterns spell them. strings.TrimSpace took more (a vertical tab, a
// no-break space, U+0085), which a proxy that holds jobs to the
// document refuses.
const spaces = " \t\n\f\r"

// maxSize is the largest size taken, in either spelling: 1048576G.
const maxSize = 1 << 50

// maxMillis is the largest duration taken as a number of milliseconds,
// in either spelling (about 34 years): a count whose nanoseconds do not
// fit wrapped round to another duration.
const maxMillis = 1 << 40

// ParseSize parses "128M", "1G", "512K", "1048576" or "1Mi".
func ParseSize(s string) (Size, error) {
	t := strings.Trim(s, spaces)
	t = strings.TrimSuffix(strings.TrimSuffix(t, "B"), "i")
	mult := int64(1)
	if t != "" {
		switch strings.ToUpper(t[len(t)-1:]) {
		case "K":
			mult = 1 << 10
		case "M":
			mult = 1 << 20
		case "G":
			mult = 1 << 30
		}
		if mult > 1 {
			t = t[:len(t)-1]
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if digits(t) && (errors.Is(err, strconv.ErrRange) || err == nil && n > maxSize/mult) {
		return 0, fmt.Errorf("invalid size %q (over %s, the largest)", s, Size(maxSize))
	}
	if err != nil || !plain(t) || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want bytes or a number with K, M or G)", s)
	}
	return Size(n * mult), nil
}

// digits reports whether t is one or more ASCII digits alone.
func digits(t string) bool {
	return t != "" && strings.Trim(t, "0123456789") == ""
}

func (s Size) String() string {
	switch {
	case s > 0 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s)>>30, 10) + "G"
	case s > 0 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s)>>20, 10) + "M"
	case s > 0 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s)>>10, 10) + "K"
	}
	return strconv.FormatInt(int64(s), 10)
}

// MarshalJSON writes the size in its short form.
func (s Size) MarshalJSON() ([]byte, error) { return json.Marshal(s.String()) }

// UnmarshalJSON accepts a number of bytes or a string such as "64M".
func (s *Size) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("invalid size %s (want bytes or a string like \"64M\")", b)
	}
	switch x := v.(type) {
	case float64:
		if x < 0 || x != math.Trunc(x) {
			return fmt.Errorf("invalid size %s (want a whole number of bytes)", b)
		}
		if x > maxSize {
			return fmt.Errorf("invalid size %s (over %s, the largest)", b, Size(maxSize))
		}
		*s = Size(x)
		return nil
	case string:
		n, err := ParseSize(x)
		if err != nil {
			return err
		}
		*s = n
		return nil
	}
	return fmt.Errorf("invalid size %s (want bytes or a string like \"64M\")", b)
}

// Duration is a time span written as milliseconds or as "2s", "500ms".
type Duration time.Duration

// ParseDuration parses "2s", "500ms", "1m" or a bare number of milliseconds.
func ParseDuration(s string) (Duration, error) {
	t := strings.Trim(s, spaces)
	if !plain(t) {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"2s\", \"500ms\" or milliseconds)", s)
	}
	if digits(t) {
		n, err := strconv.ParseInt(t, 10, 64)
		if err != nil || n > maxMillis {
			return 0, fmt.Errorf("invalid duration %q (over %d milliseconds, the largest)", s, maxMillis)
		}
		return Duration(time.Duration(n) * time.Millisecond), nil
	}
	d, err := time.ParseDuration(t)
	// Spelt right and over the largest, or over what a time.Duration
	// holds: the same bound as a number of milliseconds.
	if err != nil && goDuration.MatchString(t) || err == nil && d > maxMillis*time.Millisecond {
		return 0, fmt.Errorf("invalid duration %q (over %s, the largest)", s, maxMillis*time.Millisecond)
	}
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"2s\", \"500ms\" or milliseconds)", s)
	}
	return Duration(d), nil
}

// goDuration is a duration string as the OpenAPI document spells one,
// spaces trimmed, without a bare number.
var goDuration = regexp.MustCompile(`^([0-9]*\.?[0-9]+(ns|us|µs|μs|ms|s|m|h))+$`)

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON writes the duration as Go spells it ("2s").
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// UnmarshalJSON accepts milliseconds or a string such as "2s".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var v any
	if err := json.Unmarshal(b, &v); err != nil {
		return fmt.Errorf("invalid duration %s (want milliseconds or a string like \"2s\")", b)
	}
	switch x := v.(type) {
	case float64:
		if x < 0 {
			return fmt.Errorf("invalid duration %s (want milliseconds, 0 or more)", b)
		}
		if x > maxMillis {
			return fmt.Errorf("invalid duration %s (over %d milliseconds, the largest)", b, maxMillis)
		}
		*d = Duration(time.Duration(x * float64(time.Millisecond)))
		return nil
	case string:
		p, err := ParseDuration(x)
		if err != nil {
			return err
		}
		*d = p
		return nil
	}
	return fmt.Errorf("invalid duration %s (want milliseconds or a string like \"2s\")", b)
}

// plain reports whether t is free of two spellings that strconv and time
// take but the OpenAPI document's patterns refuse: a sign ("+1", "+1s",
// "-0") and a point with no digit after it ("1.s"). What a proxy that
// holds jobs to the schema would refuse must not run either.
func plain(t string) bool {
	if strings.HasPrefix(t, "+") || strings.HasPrefix(t, "-") {
		return false
	}
	for i := range len(t) {
		if t[i] == '.' && (i+1 == len(t) || t[i+1] < '0' || t[i+1] > '9') {
			return false
		}
	}
	return true
}
