package cgroup

import (
	"bufio"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
)

// mount is one cgroup or cgroup2 line of /proc/self/mountinfo.
type mount struct {
	Root   string   // the cgroup path mounted (not "/" inside a container without cgroupns)
	Point  string   // where it is mounted
	FSType string   // "cgroup" or "cgroup2"
	Super  []string // super options; for v1 they name the controllers
}

// parseMountinfo returns the cgroup and cgroup2 mounts of a mountinfo file.
func parseMountinfo(r io.Reader) ([]mount, error) {
	var out []mount
	s := bufio.NewScanner(r)
	s.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for s.Scan() {
		line := s.Text()
		// id parent maj:min root point opts [optional...] - fstype source super
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			return nil, fmt.Errorf("mountinfo: no separator in %q", line)
		}
		f := strings.Fields(pre)
		g := strings.Fields(post)
		if len(f) < 6 || len(g) < 3 {
			return nil, fmt.Errorf("mountinfo: short line %q", line)
		}
		if g[0] != "cgroup" && g[0] != "cgroup2" {
			continue
		}
		out = append(out, mount{
			Root:   unescapeOctal(f[3]),
			Point:  unescapeOctal(f[4]),
			FSType: g[0],
			Super:  strings.Split(g[2], ","),
		})
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("mountinfo: %w", err)
	}
	return out, nil
}

// unescapeOctal undoes the kernel's \ooo escaping of spaces, tabs,
// newlines and backslashes in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// findV1Mount returns the v1 mount that carries controller c.
func findV1Mount(mounts []mount, c string) (mount, bool) {
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		for _, o := range m.Super {
			if o == c {
				return m, true
			}
		}
	}
	return mount{}, false
}

// findV2Mount returns the cgroup2 mount at point, or the first one if point
// is empty.
func findV2Mount(mounts []mount, point string) (mount, bool) {
	for _, m := range mounts {
		if m.FSType == "cgroup2" && (point == "" || m.Point == point) {
			return m, true
		}
	}
	return mount{}, false
}

// cgroupDir maps a path from /proc/self/cgroup to a directory under mount m.
// The path is relative to the hierarchy's root, the mount shows the
// hierarchy from m.Root down, so a cgroup outside m.Root is not reachable.
func cgroupDir(m mount, procPath string) (string, error) {
	rel, err := filepath.Rel(m.Root, procPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("cgroup %s is outside the mount of %s at %s: %w", procPath, m.Root, m.Point, ErrNotSupported)
	}
	return filepath.Join(m.Point, rel), nil
}
