package jail

import (
	"debug/elf"
	"encoding/binary"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/runtimes"
)

func TestSharedLibraries(t *testing.T) {
	libs, err := SharedLibraries("/bin/sh")
	if err != nil {
		t.Fatal(err)
	}
	var interp, libc bool
	for _, l := range libs {
		interp = interp || strings.Contains(l, "ld-linux")
		libc = libc || strings.HasSuffix(l, "/libc.so.6")
	}
	if !interp || !libc {
		t.Fatalf("libraries of /bin/sh: %v, want the dynamic loader and libc", libs)
	}
	if _, err := SharedLibraries("/nonexistent-pmjail"); err == nil {
		t.Fatal("no error for a missing program")
	}
}

// A dynamic executable whose library list cannot be read must be an error,
// not a program that needs nothing (its run would fail inside the jail
// with "not found").
func TestSharedLibrariesUnreadableDynamicSection(t *testing.T) {
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
	dyn := -1
	for i, s := range f.Sections {
		if s.Type == elf.SHT_DYNAMIC {
			dyn = i
		}
	}
	if dyn < 0 {
		t.Fatal("/bin/sh has no dynamic section")
	}
	// Point the dynamic section's string-table link (Elf64_Shdr.sh_link, at
	// offset 40 of its header) at section 0, which is no string table.
	shoff := binary.LittleEndian.Uint64(data[0x28:])
	shentsize := uint64(binary.LittleEndian.Uint16(data[0x3a:]))
	binary.LittleEndian.PutUint32(data[shoff+uint64(dyn)*shentsize+40:], 0)
	broken := filepath.Join(t.TempDir(), "sh")
	if err := os.WriteFile(broken, data, 0o755); err != nil {
		t.Fatal(err)
	}
	libs, err := SharedLibraries(broken)
	if err == nil || !strings.Contains(err.Error(), broken) {
		t.Fatalf("SharedLibraries of a corrupt dynamic section = %v, %v; want an error naming the file", libs, err)
	}
}

func TestNewSpecMounts(t *testing.T) {
	launch := &runtimes.Launch{
		Program: "/bin/sh", Target: "/runtime/sh", Args: []string{"sh"},
		Binds: []runtimes.Bind{{Source: "/usr/share", Target: "/assets"}, {Source: "/usr/bin", Target: "/tools", Exec: true}},
	}
	spec, err := NewSpec(launch, RootLimits{TmpBytes: 1 << 20, OpenFiles: 16, FileBytes: 1 << 20, Tasks: 8})
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
	if _, err := NewSpec(&runtimes.Launch{Program: "/bin/sh", Binds: []runtimes.Bind{{Source: "relative", Target: "/x"}}}, RootLimits{}); err == nil {
		t.Error("a relative bind source was accepted")
	}
}

func TestCaptureCutsAtTheLimit(t *testing.T) {
	c := &capture{limit: 10}
	overflows := 0
	c.add([]byte("12345678"), func() { overflows++ })
	c.add([]byte("90abc"), func() { overflows++ })
	c.add([]byte("def"), func() { overflows++ })
	if string(c.bytes()) != "1234567890" || !c.truncated || overflows != 1 {
		t.Fatalf("captured %q truncated %v overflows %d", c.bytes(), c.truncated, overflows)
	}
}
