package rootfs

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
	"syscall"

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
func (s loaderSearch) checkInterpreter(interp string) error {
	if err := inLibraryDirs(interp, s.dirsFor(interp)); err != nil {
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

// dirsFor returns the loader's search directories that may hold libs: the
// system ones, and those /etc/ld.so.conf.d names only when a library lies
// outside the system ones (they are read only then).
func (s loaderSearch) dirsFor(libs ...string) []string {
	for _, lib := range libs {
		if !underDir(lib, s.system) {
			return append(slices.Clone(s.system), s.conf()...)
		}
	}
	return s.system
}

// holds reports whether path lies in the loader's search directories.
func (s loaderSearch) holds(path string) bool {
	return underDir(path, s.dirsFor(path))
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
	// private: some of Files passed privateLibrary, which a later run
	// checks again.
	private bool
}

// SharedLibraries returns what the dynamic loader loads for the ELF
// executable at program, run in a job's root at target (its own path when
// empty). A static executable loads nothing. The answer is kept per file
// (path, size, modification time) and target, unless it holds a library
// from outside the library directories: a daemon runs the same runtime
// for every job.
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
	libs, err := hostSearch.libraries(program, st.Sys().(*syscall.Stat_t).Uid, target)
	if err != nil {
		return Libraries{}, err
	}
	if !libs.private {
		librariesOf.Store(key, libs)
	}
	return libs.clone(), nil
}

func (l Libraries) clone() Libraries {
	return Libraries{Files: slices.Clone(l.Files), ConfDirs: slices.Clone(l.ConfDirs), private: l.private}
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
	// ownPath is its DT_RUNPATH, or its DT_RPATH, expanded (searchPath).
	ownPath []string
	// search is what a lookup of its needs searches before the library
	// directories: its DT_RUNPATH alone, or the DT_RPATH of it and of each
	// object up the chain that loaded it (searchPath).
	search []string
}

// Bounds on what a program may make the search read: far above any real
// program's (Deno loads 8 libraries; a browser ~100), and what keeps a
// crafted one from making it stat millions of paths.
const (
	maxLibraries  = 1024
	maxSearchDirs = 256 // directories a lookup searches before the system's
)

// libraries, for the program owned by owner, follows glibc's loader (elf/dl-deps.c, elf/dl-load.c): a
// program without an interpreter loads nothing; needs are met breadth
// first, in order; a name an object already loaded answers to (its path
// or its DT_SONAME) is not looked up again; each lookup searches the
// needing object's DT_RUNPATH if it has one, else the DT_RPATH of it and
// of each object up the chain that loaded it, then the directories of s,
// and skips a file the loader would not load.
func (s loaderSearch) libraries(program string, owner uint32, target string) (Libraries, error) {
	view, err := loaderView(program)
	if err != nil {
		return Libraries{}, err
	}
	var out Libraries
	if view.interp == "" {
		// The kernel runs a program without PT_INTERP itself: no loader
		// reads its dynamic segment.
		return out, nil
	}
	// The program names its interpreter: a path that is not a file in
	// the library directories could bind anything.
	if err := s.checkInterpreter(view.interp); err != nil {
		return Libraries{}, fmt.Errorf("%s: %w", program, err)
	}
	interp, err := loaderView(view.interp)
	if err != nil {
		return Libraries{}, err
	}
	if err := interp.loadable(); err != nil {
		return Libraries{}, fmt.Errorf("%s's interpreter: %w", program, err)
	}
	out.Files = append(out.Files, view.interp)
	loaded := map[string]bool{view.interp: true} // names and paths already answered
	for _, name := range []string{interp.soname, view.soname} {
		if name != "" {
			loaded[name] = true
		}
	}
	queue := []*loadedObject{{elfDynamic: view, origin: filepath.Dir(program), runsIn: filepath.Dir(target)}}
	for len(queue) > 0 {
		obj := queue[0]
		queue = queue[1:]
		if err := obj.searchPath(); err != nil {
			return Libraries{}, err
		}
		for _, name := range obj.needed {
			// The loader takes a name with a slash as a path from its
			// working directory, not one to search for; joined to the
			// search directories, "../" would bind any file, and "." the
			// directory itself.
			if strings.ContainsAny(name, "/$") || name == "." || name == ".." {
				return Libraries{}, fmt.Errorf("%s needs %q: not a library name", obj.path, name)
			}
			if loaded[name] {
				continue
			}
			lib, where, err := s.find(name, obj, owner)
			if err != nil {
				return Libraries{}, err
			}
			loaded[name] = true
			if loaded[lib.path] {
				continue
			}
			if len(out.Files) >= maxLibraries {
				return Libraries{}, fmt.Errorf("%s loads more than %d libraries", program, maxLibraries)
			}
			loaded[lib.path] = true
			if lib.soname != "" {
				loaded[lib.soname] = true
			}
			out.Files = append(out.Files, lib.path)
			dir := filepath.Dir(lib.path)
			switch where {
			case foundInConf:
				if !slices.Contains(out.ConfDirs, dir) {
					out.ConfDirs = append(out.ConfDirs, dir)
				}
			case foundPrivate:
				out.private = true
			}
			queue = append(queue, &loadedObject{elfDynamic: lib, origin: dir, runsIn: dir, loader: obj})
		}
	}
	return out, nil
}

// Where find found a library.
type foundIn int

const (
	foundInSystem foundIn = iota // the library directories, by any search path but the cache's
	foundInConf                  // those /etc/ld.so.conf.d names, as the host's cache leads there
	foundPrivate                 // obj's own search path, outside the library directories
)

// find returns the library name the loader loads for obj, and where it
// found it. A file the loader would not load (not a shared library for
// this machine) is passed over, as the loader passes it. One that only
// obj's own search path leads to, outside the library directories, must
// pass privateLibrary: the program's headers chose where it is.
func (s loaderSearch) find(name string, obj *loadedObject, owner uint32) (lib elfDynamic, where foundIn, err error) {
	own := obj.search
	var passed []string
	// The directories are asked for in turn: the conf ones are read only
	// when the others lack the library.
	for _, search := range []struct {
		dirs  func() []string
		where foundIn
	}{{func() []string { return own }, foundPrivate}, {func() []string { return s.system }, foundInSystem}, {s.conf, foundInConf}} {
		for _, d := range search.dirs() {
			candidate := filepath.Join(d, name)
			st, err := os.Stat(candidate)
			if err != nil || !st.Mode().IsRegular() {
				continue
			}
			where = search.where
			if where == foundPrivate {
				if s.holds(candidate) {
					where = foundInSystem
				} else if err := privateLibrary(candidate, owner); err != nil {
					return elfDynamic{}, 0, fmt.Errorf("%s needs %s: %w", obj.path, name, err)
				}
			}
			lib, err := loaderView(candidate)
			if err == nil {
				err = lib.loadable()
			}
			if err != nil {
				passed = append(passed, err.Error())
				continue
			}
			return lib, where, nil
		}
	}
	if len(passed) > 0 {
		return elfDynamic{}, 0, fmt.Errorf("%s needs %s: no library the loader would load (passed over %d: %s)", obj.path, name, len(passed), strings.Join(passed[:min(len(passed), 3)], "; "))
	}
	return elfDynamic{}, 0, fmt.Errorf("%s needs %s: not found in its own search path %q or the library directories", obj.path, name, own)
}

// searchPath expands the object's DT_RUNPATH, or its DT_RPATH, into the
// directories the loader searches (ownPath, then search), as glibc's loader expands
// dynamic string tokens (elf/dl-load.c). $ORIGIN is the object's
// directory; a program run at another directory than its own (through a
// symbolic link) would find other files there, so it is refused. Relative
// entries (the loader's working directory, which in a job's root holds
// nothing of the host's) are left out; $LIB and $PLATFORM, whose values
// are the loader's, are refused.
func (obj *loadedObject) searchPath() error {
	list := obj.rpath
	if obj.hasRunpath {
		list = obj.runpath
	}
	for _, entry := range list {
		dir, err := expandOrigin(entry, obj.origin)
		if err != nil {
			return fmt.Errorf("%s's library search path %q: %w", obj.path, entry, err)
		}
		if dir != entry && obj.runsIn != obj.origin {
			return fmt.Errorf("%s's library search path %q names $ORIGIN, which would be %s in the job: run it by its own path", obj.path, entry, obj.runsIn)
		}
		if dir = filepath.Clean(dir); filepath.IsAbs(dir) && !slices.Contains(obj.ownPath, dir) {
			obj.ownPath = append(obj.ownPath, dir)
		}
	}
	if len(obj.ownPath) > maxSearchDirs {
		return fmt.Errorf("%s: more than %d directories in its library search path", obj.path, maxSearchDirs)
	}
	if obj.hasRunpath {
		obj.search = obj.ownPath
		return nil
	}
	for o := obj; o != nil; o = o.loader {
		if o.hasRunpath {
			continue // its ownPath is its DT_RUNPATH, its own alone
		}
		for _, d := range o.ownPath {
			if !slices.Contains(obj.search, d) {
				obj.search = append(obj.search, d)
			}
		}
		if len(obj.search) > maxSearchDirs {
			return fmt.Errorf("%s: more than %d directories in the search paths of it and the objects that loaded it", obj.path, maxSearchDirs)
		}
	}
	return nil
}

// expandOrigin replaces the token $ORIGIN (or ${ORIGIN}) in entry with
// origin; any other token is an error. As for glibc, $ORIGINX is another
// token, not $ORIGIN followed by an X.
func expandOrigin(entry, origin string) (string, error) {
	var b strings.Builder
	for rest := entry; ; {
		i := strings.IndexByte(rest, '$')
		if i < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		b.WriteString(rest[:i])
		rest = rest[i+1:]
		var name string
		if strings.HasPrefix(rest, "{") {
			end := strings.IndexByte(rest, '}')
			if end < 0 {
				return "", errors.New("an unclosed ${")
			}
			name, rest = rest[1:end], rest[end+1:]
		} else {
			end := strings.IndexFunc(rest, func(r rune) bool {
				return !(r == '_' || 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9')
			})
			if end < 0 {
				end = len(rest)
			}
			name, rest = rest[:end], rest[end:]
		}
		if name != "ORIGIN" {
			return "", fmt.Errorf("$%s: only $ORIGIN is expanded", name)
		}
		b.WriteString(origin)
	}
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
	ehdrSize, ehdrType, ehdrMachine          = 64, 16, 18
	ehdrPhoff, ehdrPhentsize, ehdrPhnum      = 32, 54, 56
	phdrSize, phdrOff, phdrVaddr, phdrFilesz = 56, 8, 16, 32
	dynSize                                  = 16
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
	typ        elf.Type
	machine    elf.Machine
	loads      int  // PT_LOAD segments
	pie        bool // DF_1_PIE: an executable, which glibc will not load as a library
}

// loadable reports why the loader would not load the file as a library
// (elf/dl-load.c's open_verify and _dl_map_object_from_fd): only a shared
// object for this machine, with something to map, and not an executable.
func (v elfDynamic) loadable() error {
	switch {
	case v.typ != elf.ET_DYN || v.pie:
		return fmt.Errorf("%s is not a shared library (%v, PIE %v)", v.path, v.typ, v.pie)
	case v.machine != elf.EM_X86_64:
		return fmt.Errorf("%s is for %v", v.path, v.machine)
	case v.loads == 0:
		return fmt.Errorf("%s has no segment to load", v.path)
	}
	return nil
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
	view.typ, view.machine = elf.Type(le.Uint16(hdr[ehdrType:])), elf.Machine(le.Uint16(hdr[ehdrMachine:]))
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
		case elf.PT_LOAD:
			view.loads++
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
	// Of each tag but DT_NEEDED the loader keeps the last
	// (elf/get-dynamic-info.h).
	last := map[elf.DynTag]uint64{}
	var strtab, strsz uint64
	for d := entries; len(d) >= dynSize; d = d[dynSize:] {
		tag, val := elf.DynTag(le.Uint64(d)), le.Uint64(d[8:])
		if tag == elf.DT_NULL {
			break
		}
		switch tag {
		case elf.DT_NEEDED:
			names = append(names, nameAt{tag, val})
		case elf.DT_SONAME, elf.DT_RPATH, elf.DT_RUNPATH:
			last[tag] = val
		case elf.DT_STRTAB:
			strtab = val
		case elf.DT_STRSZ:
			strsz = val
		case elf.DT_FLAGS_1:
			view.pie = elf.DynFlag1(val)&elf.DF_1_PIE != 0
		}
	}
	for _, tag := range []elf.DynTag{elf.DT_SONAME, elf.DT_RPATH, elf.DT_RUNPATH} {
		if off, ok := last[tag]; ok {
			names = append(names, nameAt{tag, off})
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
			view.rpath = strings.Split(name, ":")
		case elf.DT_RUNPATH:
			view.runpath, view.hasRunpath = strings.Split(name, ":"), true
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
