package cgroup

import (
	"bufio"
	"fmt"
	"strconv"
	"strings"
)

// parseFlatKeyed parses "key value" lines (memory.events, pids.events,
// cpu.stat, memory.oom_control). Values that are not unsigned integers
// ("max") are skipped: no file read here needs them.
func parseFlatKeyed(data string) (map[string]uint64, error) {
	out := make(map[string]uint64)
	s := bufio.NewScanner(strings.NewReader(data))
	for s.Scan() {
		f := strings.Fields(s.Text())
		if len(f) == 0 {
			continue
		}
		if len(f) != 2 {
			return nil, fmt.Errorf("malformed line %q", s.Text())
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		out[f[0]] = v
	}
	return out, s.Err()
}

// parseSingle parses a one-value file; "max" (no limit) reads as ok=false.
func parseSingle(data string) (uint64, bool, error) {
	s := strings.TrimSpace(data)
	if s == "max" {
		return 0, false, nil
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("malformed value %q", s)
	}
	return v, true, nil
}

// parsePids parses cgroup.procs: one pid per line.
func parsePids(data string) ([]int, error) {
	var out []int
	for _, f := range strings.Fields(data) {
		p, err := strconv.Atoi(f)
		if err != nil || p <= 0 {
			return nil, fmt.Errorf("malformed pid %q", f)
		}
		out = append(out, p)
	}
	return out, nil
}
