package api

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Size is a byte count written as a number of bytes or as "64M", "1G",
// "10K" (binary multiples).
type Size int64

// ParseSize parses "128M", "1G", "512K", "1048576" or "1Mi".
func ParseSize(s string) (Size, error) {
	t := strings.TrimSpace(s)
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
	if err != nil || !plain(t) || n < 0 || n > (1<<50)/mult {
		return 0, fmt.Errorf("invalid size %q (want bytes or a number with K, M or G)", s)
	}
	return Size(n * mult), nil
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
		if x < 0 || x != float64(int64(x)) {
			return fmt.Errorf("invalid size %v (want a whole number of bytes)", x)
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
	t := strings.TrimSpace(s)
	if !plain(t) {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"2s\", \"500ms\" or milliseconds)", s)
	}
	if n, err := strconv.ParseInt(t, 10, 64); err == nil && n >= 0 {
		return Duration(time.Duration(n) * time.Millisecond), nil
	}
	d, err := time.ParseDuration(t)
	if err != nil || d < 0 {
		return 0, fmt.Errorf("invalid duration %q (want e.g. \"2s\", \"500ms\" or milliseconds)", s)
	}
	return Duration(d), nil
}

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
		if x < 0 || x > float64(1<<40) {
			return fmt.Errorf("invalid duration %v (want milliseconds)", x)
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
