package rootfs

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// FuzzLoaderView: loaderView is the one hand-written binary parser that
// reads files a job names (pmjail exec's program and every library it
// leads to). Whatever the bytes, it must not panic, must answer the same
// twice, must refuse with the file named, and what it accepts must be
// names the loader could use: no NUL, no empty DT_NEEDED, nothing longer
// than a path, and the header's type and machine as written.
func FuzzLoaderView(f *testing.F) {
	for _, program := range []string{"/usr/bin/true", "/bin/sh"} {
		if data, err := os.ReadFile(program); err == nil {
			f.Add(data)
		}
	}
	f.Add(minimalELF())
	f.Add([]byte("#!/bin/sh\necho hi\n"))
	f.Add([]byte(elf.ELFMAG))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		path := filepath.Join(dir, "prog")
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := loaderView(path)
		again, againErr := loaderView(path)
		if (err == nil) != (againErr == nil) || !reflect.DeepEqual(got, again) {
			t.Fatalf("two reads differ: %+v, %v and %+v, %v", got, err, again, againErr)
		}
		if err != nil {
			if !strings.HasPrefix(err.Error(), "read ELF "+path+": ") {
				t.Fatalf("refusal %q does not name the file", err)
			}
			return
		}
		if len(data) < 64 || string(data[:4]) != elf.ELFMAG {
			t.Fatalf("accepted %d bytes that are no ELF header", len(data))
		}
		le := binary.LittleEndian
		if got.typ != elf.Type(le.Uint16(data[16:])) || got.machine != elf.Machine(le.Uint16(data[18:])) {
			t.Fatalf("type %v machine %v, not the header's", got.typ, got.machine)
		}
		names := append([]string{got.interp, got.soname}, got.needed...)
		names = append(append(names, got.rpath...), got.runpath...)
		for _, n := range names {
			if strings.IndexByte(n, 0) >= 0 || len(n) > unix.PathMax {
				t.Fatalf("name %q: a NUL or longer than a path", n)
			}
		}
		for _, n := range got.needed {
			if n == "" {
				t.Fatal("an empty DT_NEEDED accepted")
			}
		}
	})
}

// minimalELF is a little-endian ELF64 shared object with one PT_LOAD
// segment holding a dynamic segment that needs "libc.so.6" and names
// itself "libx.so": the smallest file every branch of loaderView reads.
func minimalELF() []byte {
	const (
		ehdr, phdr = 64, 56
		phoff      = ehdr
		dynOff     = phoff + 2*phdr
		strOff     = dynOff + 5*16
	)
	strtab := []byte("\x00libc.so.6\x00libx.so\x00")
	b := make([]byte, strOff+len(strtab))
	le := binary.LittleEndian
	copy(b, elf.ELFMAG)
	b[elf.EI_CLASS], b[elf.EI_DATA], b[elf.EI_VERSION] = byte(elf.ELFCLASS64), byte(elf.ELFDATA2LSB), byte(elf.EV_CURRENT)
	le.PutUint16(b[16:], uint16(elf.ET_DYN))
	le.PutUint16(b[18:], uint16(elf.EM_X86_64))
	le.PutUint64(b[32:], phoff)
	le.PutUint16(b[54:], phdr)
	le.PutUint16(b[56:], 2)
	prog := func(i int, typ elf.ProgType, off, size uint64) {
		p := b[phoff+i*phdr:]
		le.PutUint32(p, uint32(typ))
		le.PutUint64(p[8:], off)   // p_offset
		le.PutUint64(p[16:], off)  // p_vaddr
		le.PutUint64(p[32:], size) // p_filesz
	}
	prog(0, elf.PT_LOAD, 0, uint64(len(b)))
	prog(1, elf.PT_DYNAMIC, dynOff, 5*16)
	dyn := func(i int, tag elf.DynTag, val uint64) {
		le.PutUint64(b[dynOff+i*16:], uint64(tag))
		le.PutUint64(b[dynOff+i*16+8:], val)
	}
	dyn(0, elf.DT_NEEDED, 1)
	dyn(1, elf.DT_SONAME, uint64(bytes.Index(strtab, []byte("libx"))))
	dyn(2, elf.DT_STRTAB, strOff)
	dyn(3, elf.DT_STRSZ, uint64(len(strtab)))
	dyn(4, elf.DT_NULL, 0)
	copy(b[strOff:], strtab)
	return b
}

// The hand-made seed is read as intended, so the fuzzer starts from a
// file that reaches the dynamic segment's names.
func TestMinimalELF(t *testing.T) {
	path := filepath.Join(t.TempDir(), "libx.so")
	if err := os.WriteFile(path, minimalELF(), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := loaderView(path)
	if err != nil || got.soname != "libx.so" || !reflect.DeepEqual(got.needed, []string{"libc.so.6"}) || got.loads != 1 || got.loadable() != nil {
		t.Fatalf("loaderView = %+v, %v; want libx.so needing libc.so.6, loadable", got, err)
	}
}
