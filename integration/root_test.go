package integration

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/jail/rootfs"
)

// TestRootLibraries_OnlyTheProgramsOwn lists the job's library directories
// from inside: they hold exactly the libraries the program loads, none of
// the host's others, whether they are bound one by one or (a state
// directory on their file system) as a tree of links to them, which the
// job's mount table must then show.
func TestRootLibraries_OnlyTheProgramsOwn(t *testing.T) {
	const ls = "/bin/ls"
	libs, err := rootfs.SharedLibraries(ls, "")
	if err != nil {
		t.Fatal(err)
	}
	var lib syscall.Stat_t
	if err := syscall.Stat(libs.Files[0], &lib); err != nil {
		t.Fatal(err)
	}
	// A state directory of this test's own (no tree an earlier run made),
	// on the libraries' file system if /tmp or /var/tmp is.
	state := t.TempDir()
	for _, d := range []string{state, filepath.Dir(state)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	var st syscall.Stat_t
	if err := syscall.Stat(state, &st); err != nil {
		t.Fatal(err)
	}
	if st.Dev != lib.Dev {
		if state, err = os.MkdirTemp("/var/tmp", "pmjail-test-"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(state) })
		if err := os.Chmod(state, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Stat(state, &st); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PMJAIL_STATE_DIR", state)

	// Every directory on the way to a library holds only what leads to one.
	want := map[string][]string{}
	for _, lib := range libs.Files {
		for p := lib; filepath.Dir(p) != "/"; p = filepath.Dir(p) {
			if dir := filepath.Dir(p); !slices.Contains(want[dir], filepath.Base(p)) {
				want[dir] = append(want[dir], filepath.Base(p))
			}
		}
	}
	for dir, names := range want {
		inv := pmjailCmd(t, "", "exec", "--json", "--", ls, "-1A", dir)
		if inv.Result == nil || inv.Result.Status != "ok" {
			t.Fatalf("ls %s: exit %d %s %s", dir, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
		got := strings.Fields(inv.Result.Stdout)
		slices.Sort(got)
		slices.Sort(names)
		if !slices.Equal(got, names) {
			t.Errorf("the job's %s holds %v, want only the way to %s's libraries %v", dir, got, ls, names)
		}
	}

	// An operator's bind under one of those directories needs a mount point
	// in it: the libraries are then bound one by one, and the bind works.
	src := t.TempDir()
	// Readable by the job's unprivileged ids, as a bind's source must be.
	for _, d := range []string{src, filepath.Dir(src)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFile(t, filepath.Join(src, "tool.txt"), "x")
	under := filepath.Join(filepath.Dir(libs.Files[0]), "pmjail-test-bind")
	inv := pmjailCmd(t, "", "exec", "--json", "--ro-bind", src+":"+under, "--", ls, under)
	if inv.Result == nil || inv.Result.Status != "ok" || strings.TrimSpace(inv.Result.Stdout) != "tool.txt" {
		t.Errorf("a bind at %s: exit %d %s %s", under, inv.ExitCode, inv.Stdout, inv.Stderr)
	}

	// The mounts looked for are cat's own libraries: a static cat (a
	// busybox's) has none to show.
	if catLibs, err := rootfs.SharedLibraries("/bin/cat", ""); err != nil || len(catLibs.Files) == 0 {
		t.Fatalf("/bin/cat loads no library (%v): its mount table cannot show one", err)
	}
	inv = pmjailCmd(t, "", "exec", "--json", "--", "/bin/cat", "/proc/self/mountinfo")
	if inv.Result == nil || inv.Result.Status != "ok" {
		t.Fatalf("cat mountinfo: exit %d %s %s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	fromTree := 0
	for _, line := range strings.Split(inv.Result.Stdout, "\n") {
		// Field 4 is the mount's root within its file system, field 5 its
		// mount point.
		if f := strings.Fields(line); len(f) > 4 && strings.Contains(f[3], "/libs/") && strings.HasSuffix(f[3], f[4]) {
			fromTree++
		}
	}
	if st.Dev != lib.Dev {
		t.Logf("%s is on another file system than %s: the libraries are bound one by one", state, libs.Files[0])
		if fromTree != 0 {
			t.Errorf("%d mounts from a tree of links across file systems:\n%s", fromTree, inv.Result.Stdout)
		}
		return
	}
	if fromTree == 0 {
		t.Errorf("no mount from a tree of links under %s:\n%s", state, inv.Result.Stdout)
	}
}

// TestRootLibraries_ProgramCannotNameAHostPath attacks the root through
// the program's own ELF headers: a second PT_INTERP naming /etc (the kernel
// runs the first), and a first one naming /etc. Neither may bind /etc into
// the job's root; the second kind of program is refused outright.
func TestRootLibraries_ProgramCannotNameAHostPath(t *testing.T) {
	const ls = "/bin/ls"
	data, err := os.ReadFile(ls)
	if err != nil {
		t.Fatal(err)
	}
	f, err := elf.NewFile(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if f.Class != elf.ELFCLASS64 || f.ByteOrder != binary.LittleEndian {
		t.Fatalf("%s is not little-endian ELF64, which this test edits", ls)
	}
	// Elf64_Phdr: type at 0, offset at 8, file size at 32.
	phoff := binary.LittleEndian.Uint64(data[0x20:])
	interp, note := -1, -1
	for i, p := range f.Progs {
		switch {
		case p.Type == elf.PT_INTERP && interp < 0:
			interp = i
		case p.Type == elf.PT_NOTE && interp >= 0 && note < 0:
			note = i
		}
	}
	if interp < 0 || note < 0 {
		t.Fatalf("%s has no PT_NOTE after its PT_INTERP to turn into a second one", ls)
	}
	dir := t.TempDir()
	// Readable by the job's unprivileged ids, as the program's path must be.
	for _, d := range []string{dir, filepath.Dir(dir)} {
		if err := os.Chmod(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	write := func(name string, change func(b []byte)) string {
		b := slices.Clone(data)
		change(b)
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, b, 0o755); err != nil {
			t.Fatal(err)
		}
		return path
	}
	nameEtc := func(b []byte, i int) {
		p, header := f.Progs[i], b[phoff+uint64(i)*56:]
		clear(b[p.Off : p.Off+p.Filesz])
		copy(b[p.Off:], "/etc")
		binary.LittleEndian.PutUint32(header, uint32(elf.PT_INTERP))
		binary.LittleEndian.PutUint64(header[32:], max(p.Filesz, 5))
	}

	second := write("ls-second-interp", func(b []byte) { nameEtc(b, note) })
	inv := pmjailCmd(t, "", "exec", "--json", "--", second, "-1A", "/etc")
	if inv.Result == nil {
		t.Fatalf("a second PT_INTERP: no result (exit %d): %s", inv.ExitCode, inv.Stderr)
	}
	if inv.Result.Status == "ok" || !strings.Contains(inv.Result.Stderr, "No such file") {
		t.Fatalf("a second PT_INTERP naming /etc: status %s, the job's ls /etc printed %q, %q; want /etc absent from the root",
			inv.Result.Status, inv.Result.Stdout, inv.Result.Stderr)
	}

	first := write("ls-first-interp", func(b []byte) { nameEtc(b, interp) })
	inv = pmjailCmd(t, "", "exec", "--json", "--", first, "-1A", "/etc")
	if inv.Result == nil || inv.Result.Status == "ok" || inv.ExitCode != 126 || !strings.Contains(inv.Stderr+inv.Stdout, "interpreter") {
		t.Fatalf("a first PT_INTERP naming /etc: exit %d, %s %s; want refused (126) for its interpreter", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
}

// TestRootLibraries_SearchPaths runs programs whose libraries only their
// own search paths lead the loader to (DT_RUNPATH, DT_RPATH with
// $ORIGIN), and one whose library only /etc/ld.so.conf.d names: the job's
// loader finds each where the host's does, with nothing else of the
// host's. A search path leading to a host file that is not a library is
// refused, and $ORIGIN where the program is reached by a link elsewhere.
func TestRootLibraries_SearchPaths(t *testing.T) {
	dir := cPrograms(t)
	for _, name := range []string{"runpath", "rpath-origin"} {
		inv := pmjailCmd(t, "", "exec", "--json", "--", filepath.Join(dir, name), name)
		if inv.Result == nil || inv.Result.Status != "ok" || inv.Result.Stdout != "greeted by "+name+"\n" {
			t.Errorf("%s: exit %d, %s %s", name, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
	}

	// Reached through a link in another directory, $ORIGIN would be that
	// directory in the job's root: refused, naming it.
	link := filepath.Join(outsideTmpDir(t, "itest-searchpaths-link-"), "linked")
	if err := os.Symlink(filepath.Join(dir, "rpath-origin"), link); err != nil {
		t.Fatal(err)
	}
	if inv := pmjailCmd(t, "", "exec", "--json", "--", link, "x"); inv.ExitCode != 126 || !strings.Contains(inv.Stderr+inv.Stdout, "$ORIGIN") {
		t.Errorf("$ORIGIN through a link: exit %d, %s %s; want refused (126) naming $ORIGIN", inv.ExitCode, inv.Stdout, inv.Stderr)
	}

	// A DT_RUNPATH of /etc and a needed "passwd": /etc/passwd is not a
	// library, and is not bound.
	if inv := pmjailCmd(t, "", "exec", "--json", "--", filepath.Join(dir, "etc-runpath")); inv.ExitCode != 126 || !strings.Contains(inv.Stderr+inv.Stdout, "/etc/passwd: not an ELF file") {
		t.Errorf("a DT_RUNPATH leading to /etc/passwd: exit %d, %s %s; want refused (126), /etc/passwd not an ELF file", inv.ExitCode, inv.Stdout, inv.Stderr)
	}

	// A library of the host's that only /etc/ld.so.conf.d's directories
	// hold: the job's root has no /etc/ld.so.cache, and its loader is
	// told the directory.
	program := filepath.Join(dir, "conf")
	if _, err := os.Stat(program); err != nil {
		testenv.SkipOrFail(t, "the host's /etc/ld.so.conf.d names no directory outside the system's that holds a library (make deps installs libfakeroot, which does)")
	}
	inv := pmjailCmd(t, "", "exec", "--json", "--", program)
	if inv.Result == nil || inv.Result.Status != "ok" || inv.Result.Stdout != "loaded\n" {
		t.Errorf("a program needing an ld.so.conf.d-only library: exit %d, %s %s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
}

// cPrograms returns the directory of integration/cprograms' C programs:
// prebuilt where the suite runs without a C compiler (the VM), else
// compiled now with the host's cc.
func cPrograms(t *testing.T) string {
	t.Helper()
	if dir := os.Getenv("PMJAIL_CPROGRAMS"); dir != "" {
		return dir
	}
	_, err := exec.LookPath("cc")
	testenv.Need(t, err == nil, "a C compiler (cc)")
	dir := outsideTmpDir(t, "itest-cprograms-")
	cmd := exec.Command("go", "run", "./integration/cprograms", "-out", dir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the C programs: %v\n%s", err, out)
	}
	return dir
}
