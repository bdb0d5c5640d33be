package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

func copyFile(from, to string, mode os.FileMode) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		return err
	}
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return fmt.Errorf("copy %s to %s: %w", from, to, err)
	}
	return dst.Close()
}

func writeFile(path, content string, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), mode)
}

// addSystemGroup adds a group to /etc/group as `groupadd --system` would,
// with the highest free gid below 1000, and returns that gid.
func addSystemGroup(name string) (uint32, error) {
	const path = "/etc/group"
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	used := map[uint64]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 {
			continue
		}
		if fields[0] == name {
			f.Close()
			return 0, fmt.Errorf("%s: group %s exists already", path, name)
		}
		if gid, err := strconv.ParseUint(fields[2], 10, 32); err == nil {
			used[gid] = true
		}
	}
	f.Close()
	if err := sc.Err(); err != nil {
		return 0, err
	}
	gid := uint64(999)
	for used[gid] {
		gid--
	}
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		return 0, err
	}
	if _, err := fmt.Fprintf(out, "%s:x:%d:\n", name, gid); err != nil {
		out.Close()
		return 0, err
	}
	return uint32(gid), out.Close()
}
