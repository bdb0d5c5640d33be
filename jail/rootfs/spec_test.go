package rootfs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/runtimes"
)

func TestSharedLibraries(t *testing.T) {
	libs := libraryFiles(t, "/bin/sh")
	var interp, libc bool
	for _, l := range libs {
		interp = interp || strings.Contains(l, "ld-linux")
		libc = libc || strings.HasSuffix(l, "/libc.so.6")
	}
	if !interp || !libc {
		t.Fatalf("libraries of /bin/sh: %v, want the dynamic loader and libc", libs)
	}
	if _, err := SharedLibraries("/nonexistent-pmjail", ""); err == nil {
		t.Fatal("no error for a missing program")
	}
}

// loaderView reads only the program headers and what they point to; on
// every ELF file of the host's usual directories it must find what
// debug/elf's section-based reading finds.
func TestLoaderViewMatchesDebugELF(t *testing.T) {
	var files []string
	for _, pattern := range []string{"/usr/bin/*", "/usr/sbin/*", "/lib/x86_64-linux-gnu/*.so*", "/lib64/*"} {
		m, _ := filepath.Glob(pattern)
		files = append(files, m...)
	}
	compared, withInterp, withNeeded, withSoname, withRunpath := 0, 0, 0, 0, 0
	for _, file := range files {
		if st, err := os.Stat(file); err != nil || !st.Mode().IsRegular() {
			continue
		}
		f, err := elf.Open(file)
		if err != nil {
			continue // not ELF
		}
		wantInterp := ""
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				data, err := io.ReadAll(p.Open())
				if err != nil {
					t.Fatalf("%s: %v", file, err)
				}
				wantInterp = strings.TrimRight(string(data), "\x00")
			}
		}
		want := elfDynamic{path: file, interp: wantInterp}
		var wantErr error
		dynStrings := func(tag elf.DynTag) []string {
			s, err := f.DynString(tag)
			wantErr = errors.Join(wantErr, err)
			return s
		}
		// Of each tag but DT_NEEDED, the loader takes the last.
		last := func(tag elf.DynTag) (string, bool) {
			s := dynStrings(tag)
			if len(s) == 0 {
				return "", false
			}
			return s[len(s)-1], true
		}
		want.needed = dynStrings(elf.DT_NEEDED)
		want.soname, _ = last(elf.DT_SONAME)
		if rpath, ok := last(elf.DT_RPATH); ok {
			want.rpath = strings.Split(rpath, ":")
		}
		if runpath, ok := last(elf.DT_RUNPATH); ok {
			want.runpath, want.hasRunpath = strings.Split(runpath, ":"), true
		}
		want.typ, want.machine = f.Type, f.Machine
		for _, p := range f.Progs {
			if p.Type == elf.PT_LOAD {
				want.loads++
			}
		}
		if flags, err := f.DynValue(elf.DT_FLAGS_1); err == nil && len(flags) > 0 {
			want.pie = elf.DynFlag1(flags[len(flags)-1])&elf.DF_1_PIE != 0
		}
		class, order := f.Class, f.ByteOrder
		f.Close()
		got, err := loaderView(file)
		if class != elf.ELFCLASS64 || order != binary.LittleEndian {
			if err == nil || !strings.Contains(err.Error(), "64-bit") {
				t.Errorf("loaderView(%s), a %v %v file: %v; want refused as not 64-bit little-endian", file, class, order, err)
			}
			continue
		}
		if wantErr != nil {
			continue
		}
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("loaderView(%s) = %+v, %v; debug/elf finds %+v", file, got, err, want)
		}
		compared++
		for _, c := range []struct {
			n  *int
			ok bool
		}{{&withInterp, got.interp != ""}, {&withNeeded, len(got.needed) > 0}, {&withSoname, got.soname != ""}, {&withRunpath, got.hasRunpath}} {
			if c.ok {
				*c.n++
			}
		}
	}
	if compared < 50 || withInterp < 10 || withNeeded < 10 || withSoname < 10 || withRunpath < 1 {
		t.Fatalf("compared %d files (%d with an interpreter, %d needing libraries, %d named, %d with a DT_RUNPATH); want a broader sample", compared, withInterp, withNeeded, withSoname, withRunpath)
	}
	t.Logf("compared %d ELF files: %d with an interpreter, %d needing libraries, %d named, %d with a DT_RUNPATH", compared, withInterp, withNeeded, withSoname, withRunpath)
}

// A dynamic executable whose library list cannot be read must be an error,
// not a program that needs nothing (its run would fail inside the jail
// with "not found"); so must a file that is not a little-endian ELF64.
func TestSharedLibrariesRefusesBrokenFiles(t *testing.T) {
	data, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.Open("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		t.Skip("test written for little-endian ELF64 (this host's /bin/sh is not)")
	}
	progOf := func(typ elf.ProgType) *elf.Prog {
		for _, p := range f.Progs {
			if p.Type == typ {
				return p
			}
		}
		t.Fatalf("/bin/sh has no %v segment", typ)
		return nil
	}
	dynamic := progOf(elf.PT_DYNAMIC)
	// dynEntry returns the offset in the file of the value of the dynamic
	// segment's first entry tagged tag (Elf64_Dyn: tag, then value).
	dynEntry := func(tag elf.DynTag) int {
		for off := int(dynamic.Off); off+16 <= int(dynamic.Off+dynamic.Filesz); off += 16 {
			if elf.DynTag(binary.LittleEndian.Uint64(data[off:])) == tag {
				return off + 8
			}
		}
		t.Fatalf("/bin/sh has no %v entry", tag)
		return 0
	}
	corrupt := map[string]func(b []byte) []byte{
		"string table outside the loaded segments": func(b []byte) []byte {
			binary.LittleEndian.PutUint64(b[dynEntry(elf.DT_STRTAB):], 1<<60)
			return b
		},
		"needed name past the string table": func(b []byte) []byte {
			strsz := binary.LittleEndian.Uint64(b[dynEntry(elf.DT_STRSZ):])
			binary.LittleEndian.PutUint64(b[dynEntry(elf.DT_NEEDED):], strsz)
			return b
		},
		"interpreter outside the library directories": func(b []byte) []byte {
			interp := progOf(elf.PT_INTERP)
			clear(b[interp.Off : interp.Off+interp.Filesz])
			copy(b[interp.Off:], "/etc")
			return b
		},
		"interpreter not NUL-terminated": func(b []byte) []byte {
			interp := progOf(elf.PT_INTERP)
			b[interp.Off+interp.Filesz-1] = 'x'
			return b
		},
		"cut in the dynamic segment": func(b []byte) []byte { return b[:dynamic.Off+8] },
		"cut in the program headers": func(b []byte) []byte { return b[:binary.LittleEndian.Uint64(b[0x20:])+8] },
		"32-bit":                     func(b []byte) []byte { b[elf.EI_CLASS] = byte(elf.ELFCLASS32); return b },
		"big-endian":                 func(b []byte) []byte { b[elf.EI_DATA] = byte(elf.ELFDATA2MSB); return b },
		"a script":                   func(b []byte) []byte { return []byte("#!/bin/sh\nexit 0\n") },
		"not ELF":                    func(b []byte) []byte { return []byte("exit 0\n") },
	}
	// The first needed name, rewritten as a path of the same length.
	strtab, first := binary.LittleEndian.Uint64(data[dynEntry(elf.DT_STRTAB):]), binary.LittleEndian.Uint64(data[dynEntry(elf.DT_NEEDED):])
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || strtab+first < p.Vaddr || strtab+first >= p.Vaddr+p.Filesz {
			continue
		}
		off := strtab + first - p.Vaddr + p.Off
		if name, _, ok := bytes.Cut(data[off:], []byte{0}); ok {
			corrupt["needed name with a slash"] = func(b []byte) []byte {
				copy(b[off:], strings.Repeat("../", len(name))[:len(name)])
				return b
			}
			// "." joined to a search directory is the directory.
			corrupt["needed name ."] = func(b []byte) []byte {
				copy(b[off:], ".\x00")
				return b
			}
			corrupt["needed name with a $"] = func(b []byte) []byte {
				copy(b[off:], "$ORIGIN\x00")
				return b
			}
		}
	}
	if corrupt["needed name with a slash"] == nil {
		t.Fatal("the first needed library's name of /bin/sh is in no loaded segment")
	}
	for name, change := range corrupt {
		t.Run(name, func(t *testing.T) {
			broken := filepath.Join(t.TempDir(), "sh")
			if err := os.WriteFile(broken, change(slices.Clone(data)), 0o755); err != nil {
				t.Fatal(err)
			}
			libs, err := SharedLibraries(broken, "")
			if err == nil || !strings.Contains(err.Error(), broken) {
				t.Fatalf("SharedLibraries = %v, %v; want an error naming the file", libs, err)
			}
			t.Log(err)
		})
	}
}

// The kernel runs a program's first PT_INTERP; a later one, naming any
// path, must not be bound into the root.
func TestSharedLibrariesTakesTheFirstInterpreter(t *testing.T) {
	data, err := os.ReadFile("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	want := libraryFiles(t, "/bin/sh")
	// Turn the program header of the PT_NOTE segment, which comes after
	// PT_INTERP, into a second PT_INTERP naming /etc (Elf64_Phdr: type at
	// 0, offset at 8, file size at 32).
	le := binary.LittleEndian
	phoff, phnum := le.Uint64(data[0x20:]), int(le.Uint16(data[0x38:]))
	seenInterp, changed := false, false
	for i := range phnum {
		ph := data[phoff+uint64(i)*56:]
		switch elf.ProgType(le.Uint32(ph)) {
		case elf.PT_INTERP:
			seenInterp = true
		case elf.PT_NOTE:
			if !seenInterp || changed {
				continue
			}
			off := le.Uint64(ph[8:])
			copy(data[off:], "/etc\x00")
			le.PutUint32(ph, uint32(elf.PT_INTERP))
			le.PutUint64(ph[32:], 5)
			changed = true
		}
	}
	if !changed {
		t.Fatal("/bin/sh has no PT_NOTE after its PT_INTERP to change")
	}
	two := filepath.Join(t.TempDir(), "sh")
	if err := os.WriteFile(two, data, 0o755); err != nil {
		t.Fatal(err)
	}
	got, err := SharedLibraries(two, "")
	if err != nil || !slices.Equal(got.Files, want) {
		t.Fatalf("SharedLibraries with a second PT_INTERP naming /etc = %q, %v; want %q", got.Files, err, want)
	}
}

func TestNewSpecMounts(t *testing.T) {
	launch := &runtimes.Launch{
		Program: "/bin/sh", Target: "/runtime/sh", Args: []string{"sh"},
		Binds: []runtimes.Bind{{Source: "/usr/share", Target: "/assets"}, {Source: "/usr/bin", Target: "/tools", Exec: true}},
	}
	spec, err := NewSpec(launch, Limits{TmpBytes: 1 << 20, OpenFiles: 16, FileBytes: 1 << 20, Tasks: 8})
	if err != nil {
		t.Fatal(err)
	}
	// /proc and /tmp first, so nothing bound under a host /tmp is hidden.
	if spec.Mounts[0].Destination != "/proc" || spec.Mounts[1].Destination != "/tmp" || !slices.Contains(spec.Mounts[1].Options, "noexec") {
		t.Fatalf("first mounts %+v", spec.Mounts[:2])
	}
	opts := map[string][]string{}
	for _, m := range spec.Mounts {
		opts[m.Destination] = m.Options
	}
	if !slices.Contains(opts["/runtime/sh"], "ro") || slices.Contains(opts["/runtime/sh"], "noexec") {
		t.Errorf("program mount %v", opts["/runtime/sh"])
	}
	if !slices.Contains(opts["/assets"], "noexec") || slices.Contains(opts["/tools"], "noexec") {
		t.Errorf("assets %v tools %v: only Exec binds may run programs", opts["/assets"], opts["/tools"])
	}
	for _, d := range devices {
		if _, ok := opts[d]; !ok {
			t.Errorf("no %s", d)
		}
	}
	if spec.Process.Args[0] != "/runtime/sh" || !spec.Root.Readonly || spec.Hostname != Hostname {
		t.Errorf("process %v root %+v hostname %q", spec.Process.Args, spec.Root, spec.Hostname)
	}
	var nproc bool
	for _, r := range spec.Process.Rlimits {
		nproc = nproc || r.Type == "RLIMIT_NPROC" && r.Hard == 8
	}
	if !nproc {
		t.Errorf("rlimits %+v: want RLIMIT_NPROC 8", spec.Process.Rlimits)
	}
	if _, err := NewSpec(&runtimes.Launch{Program: "/bin/sh", Binds: []runtimes.Bind{{Source: "relative", Target: "/x"}}}, Limits{}); err == nil {
		t.Error("a relative bind source was accepted")
	}
}

// libraryFiles returns the files the loader loads for program.
func libraryFiles(t *testing.T, program string) []string {
	t.Helper()
	libs, err := SharedLibraries(program, "")
	if err != nil {
		t.Fatal(err)
	}
	return libs.Files
}
