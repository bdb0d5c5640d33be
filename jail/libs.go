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

// Libraries are the files the dynamic loader loads for a program.
type Libraries struct {
	// Files are its interpreter and libraries, by the paths the loader
	// opens them at.
	Files []string
	// ConfDirs are the directories of Files that the loader finds only
	// through the host's /etc/ld.so.cache: those /etc/ld.so.conf.d names.
	// A job's root has no cache (its list of every library on the host is
	// not the job's to read), so its loader is told them in
	// LD_LIBRARY_PATH; it skips a directory where a file is absent, and in
	// a job's root only the files found here are present.
	ConfDirs []string
}

// SharedLibraries returns what the dynamic loader loads for the ELF
// executable at program, run in a job's root at target (its own path when
// empty). A static executable loads nothing. The answer is kept per file
// (path, size, modification time) and target: a daemon runs the same
// runtime for every job.
func SharedLibraries(program, target string) (Libraries, error) {
	st, err := os.Stat(program)
	if err != nil {
		return Libraries{}, fmt.Errorf("read ELF %s: %w", program, err)
	}
	if target == "" {
		target = program
	}
	key := libraryKey{program, target, st.Size(), st.ModTime().UnixNano()}
	if libs, ok := librariesOf.Load(key); ok {
		return libs.(Libraries).clone(), nil
	}
	libs, err := hostSearch.libraries(program, target)
	if err != nil {
		return Libraries{}, err
	}
	librariesOf.Store(key, libs)
	return libs.clone(), nil
}

func (l Libraries) clone() Libraries {
	return Libraries{Files: slices.Clone(l.Files), ConfDirs: slices.Clone(l.ConfDirs)}
}

type libraryKey struct {
	path, target string
	size, mtime  int64
}

var librariesOf sync.Map

// loaderSearch is where the loader looks for a library after the search
// paths of the objects that need it (DT_RPATH, DT_RUNPATH): the system's
// directories, then those /etc/ld.so.conf.d names. The host's loader
// reads /etc/ld.so.cache, made from both, instead; it may order a library
// found in both differently, where a job's loader takes the one bound.
type loaderSearch struct {
	system []string
	conf   func() []string
}

var hostSearch = loaderSearch{system: defaultLibraryDirs, conf: confLibraryDirs}

// loadedObject is an ELF object as the loader holds it while it loads
// what the object needs.
type loadedObject struct {
	elfDynamic
	origin string        // $ORIGIN: the directory it was found in
	runsIn string        // the directory it is at in the job's root
	loader *loadedObject // the object whose need loaded it; nil for the program
}

// libraries follows glibc's loader (elf/dl-deps.c, elf/dl-load.c): needs
// are met breadth first, in order; a name an object already loaded
// answers to (its path's name or its DT_SONAME) is not looked up again;
// each lookup searches the needing object's DT_RUNPATH if it has one,
// else the DT_RPATH of it and of each object up the chain that loaded it,
// then the directories of s.
func (s loaderSearch) libraries(program, target string) (Libraries, error) {
	view, err := loaderView(program)
	if err != nil {
		return Libraries{}, err
	}
	var out Libraries
	loaded := map[string]bool{} // names and paths already answered
	if view.interp != "" {
		// The program names its interpreter: a path that is not a file in
		// the library directories could bind anything.
		if err := checkInterpreter(view.interp); err != nil {
			return Libraries{}, fmt.Errorf("%s: %w", program, err)
		}
		interp, err := loaderView(view.interp)
		if err != nil {
			return Libraries{}, err
		}
		out.Files = append(out.Files, view.interp)
		loaded[view.interp] = true
		if interp.soname != "" {
			loaded[interp.soname] = true
		}
	}
	queue := []*loadedObject{{elfDynamic: view, origin: filepath.Dir(program), runsIn: filepath.Dir(target)}}
	for len(queue) > 0 {
		obj := queue[0]
		queue = queue[1:]
		for _, name := range obj.needed {
			// The loader takes a name with a slash as a path from its
			// working directory, not one to search for; joined to the
			// search directories, "../" would bind any file.
			if strings.ContainsRune(name, '/') {
				return Libraries{}, fmt.Errorf("%s needs %q: a path, not a library name", obj.path, name)
			}
			if loaded[name] {
				continue
			}
			found, conf, err := s.find(name, obj)
			if err != nil {
				return Libraries{}, err
			}
			loaded[name] = true
			if loaded[found] {
				continue
			}
			loaded[found] = true
			lib, err := loaderView(found)
			if err != nil {
				return Libraries{}, err
			}
			if lib.soname != "" {
				loaded[lib.soname] = true
			}
			out.Files = append(out.Files, found)
			if dir := filepath.Dir(found); conf && !slices.Contains(out.ConfDirs, dir) {
				out.ConfDirs = append(out.ConfDirs, dir)
			}
			queue = append(queue, &loadedObject{elfDynamic: lib, origin: filepath.Dir(found), runsIn: filepath.Dir(found), loader: obj})
		}
	}
	return out, nil
}

// find returns the path the loader finds the library name at for obj, and
// whether only the host's cache leads there.
func (s loaderSearch) find(name string, obj *loadedObject) (path string, conf bool, err error) {
	var own []string
	if obj.hasRunpath {
		if own, err = obj.expand(obj.runpath); err != nil {
			return "", false, err
		}
	} else {
		for o := obj; o != nil; o = o.loader {
			if o.hasRunpath {
				continue
			}
			dirs, err := o.expand(o.rpath)
			if err != nil {
				return "", false, err
			}
			own = append(own, dirs...)
		}
	}
	if path, ok := lookIn(own, name); ok {
		return path, false, nil
	}
	if path, ok := lookIn(s.system, name); ok {
		return path, false, nil
	}
	if path, ok := lookIn(s.conf(), name); ok {
		return path, true, nil
	}
	return "", false, fmt.Errorf("%s needs %s: not found in %v", obj.path, name, slices.Concat(own, s.system, s.conf()))
}

// expand turns a DT_RPATH or DT_RUNPATH list into the directories the
// loader searches. $ORIGIN is the object's directory; a program run at
// another directory than its own (through a symbolic link) would find
// other files there, so it is refused. Relative entries (the loader's working directory, which in a
// job's root holds nothing of the host's) are left out, and $LIB and
// $PLATFORM, whose values are the loader's, are refused.
func (obj *loadedObject) expand(list []string) ([]string, error) {
	var dirs []string
	for _, entry := range list {
		dir := entry
		for _, token := range []string{"$ORIGIN", "${ORIGIN}"} {
			if strings.Contains(dir, token) && obj.runsIn != obj.origin {
				return nil, fmt.Errorf("%s's library search path %q names $ORIGIN, which would be %s in the job: run it by its own path", obj.path, entry, obj.runsIn)
			}
			dir = strings.ReplaceAll(dir, token, obj.origin)
		}
		if strings.Contains(dir, "$") {
			return nil, fmt.Errorf("%s's library search path %q: only $ORIGIN is expanded", obj.path, entry)
		}
		if filepath.IsAbs(dir) {
			dirs = append(dirs, filepath.Clean(dir))
		}
	}
	return dirs, nil
}

// lookIn returns the first regular file called name in dirs.
func lookIn(dirs []string, name string) (string, bool) {
	for _, dir := range dirs {
		candidate := filepath.Join(dir, name)
		if st, err := os.Stat(candidate); err == nil && st.Mode().IsRegular() {
			return candidate, true
		}
	}
	return "", false
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

// elfDynamic is what the dynamic loader reads of an ELF file.
type elfDynamic struct {
	path    string
	interp  string   // PT_INTERP: the first, as the kernel runs it
	needed  []string // DT_NEEDED, in order
	soname  string   // DT_SONAME
	rpath   []string // DT_RPATH, split at ':'
	runpath []string // DT_RUNPATH, split at ':'
	// hasRunpath: a DT_RUNPATH entry, even an empty one, turns the
	// object's DT_RPATH off.
	hasRunpath bool
}

// loaderView reads what the dynamic loader reads of an ELF file: its
// program headers, its interpreter (PT_INTERP) and, in its dynamic
// segment, the names of the libraries it needs (DT_NEEDED), its own name
// (DT_SONAME) and its search paths (DT_RPATH, DT_RUNPATH), found through
// the segments the loader maps. debug/elf's File would parse every section
// header and read whole sections (~0.5 ms for Deno's eight files, on every
// CLI run); this reads a few small ranges a file. Section headers, which
// the loader ignores, are ignored here too. Only little-endian ELF64 is
// read: the seccomp filters admit the native system-call ABI alone, so
// nothing else could run in a jail.
func loaderView(path string) (elfDynamic, error) {
	f, err := os.Open(path)
	if err != nil {
		return elfDynamic{}, fmt.Errorf("read ELF %s: %w", path, err)
	}
	defer f.Close()
	fail := func(format string, args ...any) (elfDynamic, error) {
		return elfDynamic{}, fmt.Errorf("read ELF %s: %s", path, fmt.Sprintf(format, args...))
	}
	view := elfDynamic{path: path}
	le := binary.LittleEndian
	hdr := make([]byte, ehdrSize)
	n, err := f.ReadAt(hdr, 0)
	if n < len(elf.ELFMAG) || string(hdr[:len(elf.ELFMAG)]) != elf.ELFMAG {
		if interp, _, _ := bytes.Cut(hdr[:n], []byte("\n")); bytes.HasPrefix(interp, []byte("#!")) {
			// The kernel would run the interpreter it names, which a job's
			// root does not hold.
			return fail("a script (%q), not an ELF file: run its interpreter, with the script bound (--ro-bind)", interp)
		}
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
			if view.interp != "" {
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
			view.interp, _, _ = strings.Cut(string(name), "\x00")
		case elf.PT_DYNAMIC:
			dynamic = p
		}
	}
	// A static executable has no dynamic segment and needs nothing.
	if dynamic == nil {
		return view, nil
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
	type nameAt struct {
		tag elf.DynTag
		off uint64
	}
	var names []nameAt
	var strtab, strsz uint64
	for d := entries; len(d) >= dynSize; d = d[dynSize:] {
		tag, val := elf.DynTag(le.Uint64(d)), le.Uint64(d[8:])
		if tag == elf.DT_NULL {
			break
		}
		switch tag {
		case elf.DT_NEEDED, elf.DT_SONAME, elf.DT_RPATH, elf.DT_RUNPATH:
			names = append(names, nameAt{tag, val})
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
		name, err := readName(f, progs, strtab, strsz, n.off)
		if err != nil {
			return fail("%v at %d in the string table at %#x: %v", n.tag, n.off, strtab, err)
		}
		switch n.tag {
		case elf.DT_NEEDED:
			if name == "" {
				return fail("DT_NEEDED at %d in the string table at %#x: an empty name", n.off, strtab)
			}
			view.needed = append(view.needed, name)
		case elf.DT_SONAME:
			view.soname = name
		case elf.DT_RPATH:
			view.rpath = append(view.rpath, strings.Split(name, ":")...)
		case elf.DT_RUNPATH:
			view.runpath = append(view.runpath, strings.Split(name, ":")...)
			view.hasRunpath = true
		}
	}
	return view, nil
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
	if end < 0 {
		return "", errors.New("not a NUL-terminated string")
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
