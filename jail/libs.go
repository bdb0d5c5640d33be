package jail

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// defaultLibraryDirs are searched for DT_NEEDED libraries, in the dynamic
// loader's order for a Debian-style multiarch system; the directories
// /etc/ld.so.conf.d names come after them (see confLibraryDirs).
var defaultLibraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// confLibraryDirs are the directories /etc/ld.so.conf.d names, read once
// and only when a library is not in the default ones (~0.1 ms a CLI run).
var confLibraryDirs = sync.OnceValue(func() []string {
	var dirs []string
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
				dirs = append(dirs, line)
			}
		}
		f.Close()
	}
	return dirs
})

// findLibrary returns the path the loader finds the library name at.
func findLibrary(name string) (string, bool) {
	for _, dirs := range [][]string{defaultLibraryDirs, confLibraryDirs()} {
		for _, dir := range dirs {
			candidate := filepath.Join(dir, name)
			if _, err := os.Stat(candidate); err == nil {
				return candidate, true
			}
		}
	}
	return "", false
}

// checkInterpreter accepts a program's interpreter (PT_INTERP) only as a
// regular file under the loader's search directories, by a clean absolute
// path.
func checkInterpreter(interp string) error {
	if err := inLibraryDirs(interp, searchDirsFor([]string{interp})); err != nil {
		return fmt.Errorf("interpreter: %w", err)
	}
	st, err := os.Stat(interp)
	if err != nil {
		return fmt.Errorf("interpreter: %w", err)
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("interpreter %s is not a regular file", interp)
	}
	return nil
}

// searchDirsFor returns the loader's search directories that hold libs:
// the default ones, and those /etc/ld.so.conf.d names only when a library
// lies outside the defaults.
func searchDirsFor(libs []string) []string {
	for _, lib := range libs {
		if !underDir(lib, defaultLibraryDirs) {
			return append(slices.Clone(defaultLibraryDirs), confLibraryDirs()...)
		}
	}
	return defaultLibraryDirs
}

// inLibraryDirs accepts a clean absolute path beneath one of dirs.
func inLibraryDirs(path string, dirs []string) error {
	switch {
	case !filepath.IsAbs(path) || filepath.Clean(path) != path:
		return fmt.Errorf("%q is not a clean absolute path", path)
	case !underDir(path, dirs):
		return fmt.Errorf("%s is outside the library directories %v", path, dirs)
	}
	return nil
}

// underDir reports whether path lies beneath one of dirs.
func underDir(path string, dirs []string) bool {
	return slices.ContainsFunc(dirs, func(d string) bool { return strings.HasPrefix(path, strings.TrimSuffix(d, "/")+"/") })
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
		interp, needed, err := loaderView(file)
		if err != nil {
			return err
		}
		if top && interp != "" {
			// The program names its interpreter: a path that is not a
			// file in the library directories could bind anything.
			if err := checkInterpreter(interp); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
			seen[interp] = true
			out = append(out, interp)
		}
		for _, lib := range needed {
			// The loader takes a name with a slash as a path from its
			// working directory, not one to search for; joined to the
			// search directories, "../" would bind any file.
			if strings.ContainsRune(lib, '/') {
				return fmt.Errorf("%s needs %q: a path, not a library name", file, lib)
			}
			found, ok := findLibrary(lib)
			if !ok {
				return fmt.Errorf("%s needs %s: not found in %v or %v", file, lib, defaultLibraryDirs, confLibraryDirs())
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

// Bounds on what loaderView reads of a file: far above any real program's
// (Deno has 14 program headers and a 0.6 KB dynamic segment).
const (
	maxProgHeaders  = 1 << 10
	maxDynamicBytes = 1 << 20
)

// Sizes and field offsets of the little-endian ELF64 structures loaderView
// decodes (elf.Header64, elf.Prog64, elf.Dyn64). Decoding them by hand
// rather than through encoding/binary's reflection halves a CLI run's
// reading of them.
const (
	ehdrSize, ehdrPhoff, ehdrPhentsize, ehdrPhnum = 64, 32, 54, 56
	phdrSize, phdrOff, phdrVaddr, phdrFilesz      = 56, 8, 16, 32
	dynSize                                       = 16
)

// loaderView reads what the dynamic loader reads of an ELF file: its
// program headers, its interpreter (PT_INTERP) and the names of the
// libraries its dynamic segment needs (DT_NEEDED), found through the
// segments the loader maps. debug/elf's File would parse every section
// header and read whole sections (~0.5 ms for Deno's eight files, on every
// CLI run); this reads a few small ranges a file. Section headers, which
// the loader ignores, are ignored here too. Only little-endian ELF64 is
// read: the seccomp filters admit the native system-call ABI alone, so
// nothing else could run in a jail.
func loaderView(path string) (interp string, needed []string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", nil, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	fail := func(format string, args ...any) (string, []string, error) {
		return "", nil, fmt.Errorf("read ELF %s: %s", path, fmt.Sprintf(format, args...))
	}
	le := binary.LittleEndian
	hdr := make([]byte, ehdrSize)
	n, err := f.ReadAt(hdr, 0)
	if n < len(elf.ELFMAG) || string(hdr[:len(elf.ELFMAG)]) != elf.ELFMAG {
		return fail("not an ELF file")
	}
	if err != nil {
		return fail("header: %v", err)
	}
	if class, data := elf.Class(hdr[elf.EI_CLASS]), elf.Data(hdr[elf.EI_DATA]); class != elf.ELFCLASS64 || data != elf.ELFDATA2LSB {
		return fail("%v %v: only little-endian 64-bit programs run in a jail", class, data)
	}
	phoff, phentsize, phnum := le.Uint64(hdr[ehdrPhoff:]), le.Uint16(hdr[ehdrPhentsize:]), le.Uint16(hdr[ehdrPhnum:])
	if phentsize != phdrSize || phnum > maxProgHeaders {
		return fail("%d program headers of %d bytes", phnum, phentsize)
	}
	table := make([]byte, int(phnum)*phdrSize)
	if _, err := f.ReadAt(table, int64(phoff)); err != nil {
		return fail("program headers: %v", err)
	}
	progs := make([]elf.Prog64, phnum)
	var dynamic *elf.Prog64
	for i := range progs {
		ph := table[i*phdrSize:]
		p := &progs[i]
		p.Type, p.Off, p.Vaddr, p.Filesz = le.Uint32(ph), le.Uint64(ph[phdrOff:]), le.Uint64(ph[phdrVaddr:]), le.Uint64(ph[phdrFilesz:])
		switch elf.ProgType(p.Type) {
		case elf.PT_INTERP:
			// The kernel runs the first one, a NUL-terminated path.
			if interp != "" {
				continue
			}
			if p.Filesz == 0 || p.Filesz > unix.PathMax {
				return fail("interpreter of %d bytes", p.Filesz)
			}
			name := make([]byte, p.Filesz)
			if _, err := f.ReadAt(name, int64(p.Off)); err != nil {
				return fail("interpreter: %v", err)
			}
			if name[len(name)-1] != 0 || name[0] == 0 {
				return fail("interpreter %q is not a NUL-terminated path", name)
			}
			interp, _, _ = strings.Cut(string(name), "\x00")
		case elf.PT_DYNAMIC:
			dynamic = p
		}
	}
	// A static executable has no dynamic segment and needs nothing.
	if dynamic == nil {
		return interp, nil, nil
	}
	if dynamic.Filesz > maxDynamicBytes {
		return fail("dynamic segment of %d bytes", dynamic.Filesz)
	}
	// Read where the loader finds it: at its address, in a loaded segment.
	off, ok := fileOffset(progs, dynamic.Vaddr, dynamic.Filesz)
	if !ok {
		return fail("dynamic segment at %#x outside the loaded segments", dynamic.Vaddr)
	}
	entries := make([]byte, dynamic.Filesz/dynSize*dynSize)
	if _, err := f.ReadAt(entries, int64(off)); err != nil {
		return fail("dynamic segment: %v", err)
	}
	var names []uint64
	var strtab, strsz uint64
	for d := entries; len(d) >= dynSize; d = d[dynSize:] {
		tag, val := elf.DynTag(le.Uint64(d)), le.Uint64(d[8:])
		if tag == elf.DT_NULL {
			break
		}
		switch tag {
		case elf.DT_NEEDED:
			names = append(names, val)
		case elf.DT_STRTAB:
			strtab = val
		case elf.DT_STRSZ:
			strsz = val
		}
	}
	// A program that needs libraries whose names cannot be read must not
	// pass as needing nothing: its run would fail inside the jail with
	// "not found".
	for _, n := range names {
		name, err := readName(f, progs, strtab, strsz, n)
		if err != nil {
			return fail("name of a needed library, at %d in the string table at %#x: %v", n, strtab, err)
		}
		needed = append(needed, name)
	}
	return interp, needed, nil
}

// readName reads the NUL-terminated string at offset n of the string table
// at the virtual address strtab, strsz bytes long, from the PT_LOAD segment
// that holds it. A library's name is a path, so PATH_MAX bytes suffice.
func readName(f *os.File, progs []elf.Prog64, strtab, strsz, n uint64) (string, error) {
	if n >= strsz {
		return "", errors.New("past the table's end")
	}
	size := min(strsz-n, unix.PathMax)
	off, ok := fileOffset(progs, strtab+n, size)
	if !ok {
		return "", errors.New("outside the loaded segments")
	}
	buf := make([]byte, size)
	if _, err := f.ReadAt(buf, int64(off)); err != nil {
		return "", err
	}
	end := bytes.IndexByte(buf, 0)
	if end <= 0 {
		return "", errors.New("not a name")
	}
	return string(buf[:end]), nil
}

// fileOffset maps size bytes at the virtual address addr to where a
// PT_LOAD segment holds them in the file.
func fileOffset(progs []elf.Prog64, addr, size uint64) (uint64, bool) {
	for _, p := range progs {
		if elf.ProgType(p.Type) != elf.PT_LOAD || addr < p.Vaddr {
			continue
		}
		if rel := addr - p.Vaddr; rel <= p.Filesz && size <= p.Filesz-rel {
			return p.Off + rel, true
		}
	}
	return 0, false
}
