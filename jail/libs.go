package jail

import (
	"bufio"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
)

// libraryDirs are searched for DT_NEEDED libraries, in the dynamic loader's
// order for a Debian-style multiarch system; /etc/ld.so.conf.d adds more.
var defaultLibraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

var (
	libraryDirsOnce sync.Once
	libraryDirs     []string
)

func searchDirs() []string {
	libraryDirsOnce.Do(func() {
		libraryDirs = append(libraryDirs, defaultLibraryDirs...)
		confs, _ := filepath.Glob("/etc/ld.so.conf.d/*.conf")
		for _, c := range confs {
			f, err := os.Open(c)
			if err != nil {
				continue
			}
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				line := strings.TrimSpace(sc.Text())
				if strings.HasPrefix(line, "/") {
					libraryDirs = append(libraryDirs, line)
				}
			}
			f.Close()
		}
	})
	return libraryDirs
}

// SharedLibraries returns the dynamic loader and every shared library the
// ELF executable at path loads, transitively, as the paths the loader will
// open them by. A static executable has none. The answer is kept per file
// (path, size, modification time): a daemon runs the same runtime for every
// job.
func SharedLibraries(path string) ([]string, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	key := libraryKey{path, st.Size(), st.ModTime().UnixNano()}
	if libs, ok := librariesOf.Load(key); ok {
		return slices.Clone(libs.([]string)), nil
	}
	libs, err := sharedLibraries(path)
	if err != nil {
		return nil, err
	}
	librariesOf.Store(key, libs)
	return slices.Clone(libs), nil
}

type libraryKey struct {
	path  string
	size  int64
	mtime int64
}

var librariesOf sync.Map

func sharedLibraries(path string) ([]string, error) {
	seen := map[string]bool{}
	var out []string
	var visit func(file string, top bool) error
	visit = func(file string, top bool) error {
		f, err := elf.Open(file)
		if err != nil {
			return fmt.Errorf("read ELF %s: %w", file, err)
		}
		defer f.Close()
		if top {
			for _, p := range f.Progs {
				if p.Type != elf.PT_INTERP {
					continue
				}
				data := make([]byte, p.Filesz)
				if _, err := p.ReadAt(data, 0); err != nil {
					return fmt.Errorf("read interpreter of %s: %w", file, err)
				}
				interp := strings.TrimRight(string(data), "\x00")
				if !seen[interp] {
					seen[interp] = true
					out = append(out, interp)
				}
			}
		}
		// A static executable has no dynamic section and needs nothing; a
		// dynamic one that cannot be read must not pass as needing nothing.
		needed, err := f.DynString(elf.DT_NEEDED)
		if err != nil {
			return fmt.Errorf("read the libraries %s needs: %w", file, err)
		}
		for _, lib := range needed {
			found := ""
			for _, dir := range searchDirs() {
				candidate := filepath.Join(dir, lib)
				if _, err := os.Stat(candidate); err == nil {
					found = candidate
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s: not found in %v", file, lib, searchDirs())
			}
			if seen[found] {
				continue
			}
			seen[found] = true
			out = append(out, found)
			if err := visit(found, false); err != nil {
				return err
			}
		}
		return nil
	}
	if err := visit(path, true); err != nil {
		return nil, err
	}
	return out, nil
}
