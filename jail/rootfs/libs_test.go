package rootfs

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/testenv"
)

// hostLoader is the dynamic loader this host's programs name.
const hostLoader = "/lib64/ld-linux-x86-64.so.2"

// loaderLists returns the files the host's loader loads for program, by
// its list mode (what ldd runs: it maps them and runs nothing), or false
// where it finds a library missing.
func loaderLists(t *testing.T, program string) ([]string, bool) {
	t.Helper()
	cmd := exec.Command(hostLoader, "--list", program)
	cmd.Env = []string{} // no LD_LIBRARY_PATH
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		if strings.Contains(stderr.String(), "cannot open shared object file") {
			return nil, false
		}
		t.Fatalf("%s --list %s: %v\n%s", hostLoader, program, err, stderr.Bytes())
	}
	var files []string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "name => /path (0x...)", "/path (0x...)" or "linux-vdso.so.1 (0x...)".
		line := strings.TrimSpace(sc.Text())
		if _, path, ok := strings.Cut(line, " => "); ok {
			line = path
		}
		if path, _, _ := strings.Cut(line, " ("); strings.HasPrefix(path, "/") {
			files = append(files, path)
		}
	}
	return files, true
}

// inodes names files by device and inode: the host's loader finds a
// library through /etc/ld.so.cache, perhaps by another of its paths
// (/usr/lib for /lib).
func inodes(t *testing.T, files []string) []string {
	t.Helper()
	var ids []string
	for _, f := range files {
		var st syscall.Stat_t
		if err := syscall.Stat(f, &st); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, string(fileID{st.Dev, st.Ino}.bytes()))
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// On the host's own programs, what a job's root is given to load is what
// the host's loader loads: the same files, nothing more (the loader under
// its other name, say), and a program it cannot load is refused.
func TestSharedLibrariesMatchTheHostLoader(t *testing.T) {
	var programs []string
	for _, pattern := range []string{"/usr/bin/*", "/usr/sbin/*"} {
		m, _ := filepath.Glob(pattern)
		for _, p := range m {
			// By its own path: the loader's list mode takes $ORIGIN from
			// the path it is given, an exec from the file's.
			if real, err := filepath.EvalSymlinks(p); err == nil {
				programs = append(programs, real)
			}
		}
	}
	slices.Sort(programs)
	compared, withRunpath := 0, 0
	for _, program := range slices.Compact(programs) {
		if st, err := os.Stat(program); err != nil || !st.Mode().IsRegular() || st.Mode()&0o111 == 0 {
			continue
		}
		view, err := loaderView(program)
		if err != nil || view.interp != hostLoader {
			continue // a script, static, or not for this loader
		}
		want, loadable := loaderLists(t, program)
		libs, err := SharedLibraries(program, "")
		if !loadable {
			if err == nil {
				t.Errorf("%s: the host's loader finds a library missing; SharedLibraries found %v", program, libs.Files)
			}
			continue
		}
		if err != nil {
			t.Errorf("SharedLibraries(%s): %v; the host's loader loads %v", program, err, want)
			continue
		}
		if got, want := inodes(t, libs.Files), inodes(t, want); !slices.Equal(got, want) || len(libs.Files) != len(got) {
			t.Errorf("SharedLibraries(%s) = %v; the host's loader loads %v", program, libs.Files, want)
		}
		compared++
		if view.hasRunpath || len(view.rpath) > 0 {
			withRunpath++
		}
	}
	if compared < 100 || withRunpath < 1 {
		t.Fatalf("compared %d programs, %d with their own search path: want a broader sample", compared, withRunpath)
	}
	t.Logf("compared %d programs with the host's loader, %d with their own search path", compared, withRunpath)
}

// compile builds a C source into out with cc and extra flags.
func compile(t *testing.T, out, source string, flags ...string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		testenv.SkipOrFail(t, "no C compiler: %v", err)
	}
	src := out + ".c"
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		t.Fatal(err)
	}
	args := append([]string{"-o", out, src}, flags...)
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		t.Fatalf("cc %v: %v\n%s", args, err, b)
	}
}

// A program's own search paths are followed as glibc's loader follows
// them, which the host's loader confirms for each program built here: a
// DT_RPATH serves the libraries loaded on its behalf too, a DT_RUNPATH
// only the object's own needs, and $ORIGIN is the object's directory.
func TestSharedLibrariesFollowSearchPaths(t *testing.T) {
	dir := openTempDir(t)
	libs := filepath.Join(dir, "lib")
	if err := os.Mkdir(libs, 0o755); err != nil {
		t.Fatal(err)
	}
	leaf, mid := filepath.Join(libs, "libleaf.so"), filepath.Join(libs, "libmid.so")
	compile(t, leaf, "int leaf(void) { return 1; }\n", "-shared", "-fPIC", "-Wl,-soname,libleaf.so")
	compile(t, mid, "int leaf(void);\nint mid(void) { return leaf(); }\n", "-shared", "-fPIC", "-Wl,-soname,libmid.so", "-L"+libs, "-lleaf")
	const main = "int mid(void);\nint main(void) { return mid() - 1; }\n"
	build := func(name string, flags ...string) string {
		out := filepath.Join(dir, name)
		compile(t, out, main, append([]string{"-L" + libs, "-lmid", "-Wl,--allow-shlib-undefined"}, flags...)...)
		return out
	}
	cases := []struct {
		name  string
		flags []string
		want  []string // the program's own libraries, beside libc and the loader
	}{
		{"rpath", []string{"-Wl,--disable-new-dtags,-rpath," + libs}, []string{mid, leaf}},
		{"runpath", []string{"-Wl,--enable-new-dtags,-rpath," + libs}, nil},
		{"origin", []string{"-Wl,--disable-new-dtags,-rpath,$ORIGIN/lib"}, []string{mid, leaf}},
		{"origin-braces", []string{"-Wl,--disable-new-dtags,-rpath,${ORIGIN}/lib"}, []string{mid, leaf}},
		{"relative-ignored", []string{"-Wl,--disable-new-dtags,-rpath,lib"}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			agreesWithTheHost(t, build(c.name, c.flags...), c.want)
		})
	}

	// A DT_RUNPATH that names the library's own directory in the library
	// serves its needs.
	if err := os.Remove(mid); err != nil {
		t.Fatal(err)
	}
	compile(t, mid, "int leaf(void);\nint mid(void) { return leaf(); }\n", "-shared", "-fPIC", "-Wl,-soname,libmid.so", "-L"+libs, "-lleaf", "-Wl,--enable-new-dtags,-rpath,$ORIGIN")
	agreesWithTheHost(t, build("runpath-chain", "-Wl,--enable-new-dtags,-rpath,"+libs), []string{mid, leaf})

	// $ORIGIN is where the program is in the job's root: run by a link
	// elsewhere, it would name another directory.
	origin := build("origin-elsewhere", "-Wl,-rpath,$ORIGIN/lib")
	if _, err := SharedLibraries(origin, "/usr/local/bin/origin-elsewhere"); err == nil || !strings.Contains(err.Error(), "$ORIGIN") {
		t.Errorf("SharedLibraries run at another directory = %v; want an error naming $ORIGIN", err)
	}
	if _, err := SharedLibraries(origin, filepath.Join(dir, "other-name")); err != nil {
		t.Errorf("SharedLibraries run under another name in its own directory: %v", err)
	}

	// $LIB and $PLATFORM are the loader's own values: refused, not guessed.
	platform := build("platform", "-Wl,-rpath,"+libs+"/$PLATFORM")
	if _, err := SharedLibraries(platform, ""); err == nil || !strings.Contains(err.Error(), "$PLATFORM") {
		t.Errorf("SharedLibraries with $PLATFORM = %v; want an error naming it", err)
	}
}

// agreesWithTheHost checks SharedLibraries against the host's loader for
// a program built here: both load the same files, own among them, or (own
// empty) both find a library missing.
func agreesWithTheHost(t *testing.T, program string, own []string) {
	t.Helper()
	want, loadable := loaderLists(t, program)
	got, err := SharedLibraries(program, "")
	switch {
	case len(own) == 0:
		if loadable || err == nil {
			t.Fatalf("SharedLibraries(%s) = %v, %v (the host's loader loads it: %v); want an error", program, got.Files, err, loadable)
		}
		t.Log(err)
	case err != nil || !loadable:
		t.Fatalf("SharedLibraries(%s): %v (the host's loader loads it: %v)", program, err, loadable)
	case !slices.Equal(inodes(t, got.Files), inodes(t, want)) || len(got.Files) != len(want):
		t.Errorf("SharedLibraries(%s) = %v; the host's loader loads %v", program, got.Files, want)
	case slices.ContainsFunc(own, func(lib string) bool { return !slices.Contains(got.Files, lib) }):
		t.Errorf("SharedLibraries(%s) = %v; want %v among them", program, got.Files, own)
	}
}

// A library only /etc/ld.so.conf.d's directories hold is found there, and
// its directory is named for LD_LIBRARY_PATH: a job's root has no
// /etc/ld.so.cache to lead its loader to it.
func TestSharedLibrariesFromConfDirs(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libconf.so")
	compile(t, lib, "int conf(void) { return 0; }\n", "-shared", "-fPIC", "-Wl,-soname,libconf.so")
	program := filepath.Join(dir, "program")
	compile(t, program, "int conf(void);\nint main(void) { return conf(); }\n", "-L"+dir, "-lconf")

	if _, err := SharedLibraries(program, ""); err == nil {
		t.Fatalf("found %s's libconf.so without its directory", program)
	}
	search := loaderSearch{system: defaultLibraryDirs, conf: func() []string { return []string{"/nonexistent-pmjail", dir} }}
	owner := func(path string) uint32 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Uid
	}
	got, err := search.libraries(program, owner(program), program)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(got.Files, lib) || !slices.Equal(got.ConfDirs, []string{dir}) {
		t.Errorf("libraries = %+v; want %s, from the configured directory %s", got, lib, dir)
	}
	// libc, found in a system directory first, names none.
	if got, err := search.libraries("/bin/sh", owner("/bin/sh"), "/bin/sh"); err != nil || len(got.ConfDirs) != 0 {
		t.Errorf("/bin/sh's libraries = %+v, %v; want none from the configured directories", got, err)
	}
	// Nor are the configured directories read for it: every run's
	// runtime finds its libraries in the system ones.
	read := 0
	counting := loaderSearch{system: defaultLibraryDirs, conf: func() []string { read++; return nil }}
	if _, err := counting.libraries("/bin/sh", owner("/bin/sh"), "/bin/sh"); err != nil || read != 0 {
		t.Errorf("/bin/sh's libraries: err %v, the configured directories read %d times; want none", err, read)
	}
}

func TestLibraryPathEnv(t *testing.T) {
	env := []string{"PATH=/bin", "LD_LIBRARY_PATH=/own"}
	for _, c := range []struct {
		env, dirs, want []string
	}{
		{env[:1], nil, env[:1]},
		{env[:1], []string{"/a", "/b"}, []string{"PATH=/bin", "LD_LIBRARY_PATH=/a:/b"}},
		{env, []string{"/a"}, []string{"PATH=/bin", "LD_LIBRARY_PATH=/own:/a"}},
		{[]string{"LD_LIBRARY_PATH="}, []string{"/a"}, []string{"LD_LIBRARY_PATH=/a"}},
	} {
		if got := libraryPathEnv(c.env, c.dirs); !slices.Equal(got, c.want) {
			t.Errorf("libraryPathEnv(%q, %q) = %q, want %q", c.env, c.dirs, got, c.want)
		}
	}
	if env[1] != "LD_LIBRARY_PATH=/own" {
		t.Errorf("libraryPathEnv changed its argument: %q", env)
	}
}

// A program's headers choose the search path; what they lead to is bound
// only if it is a library the loader would load, and, outside the library
// directories, one only root or the program's owner could have put there.
func TestSharedLibrariesRefusesCraftedSearchPaths(t *testing.T) {
	dir := openTempDir(t)
	lib := filepath.Join(dir, "lib")
	if err := os.Mkdir(lib, 0o755); err != nil {
		t.Fatal(err)
	}
	// An executable where a library is looked for: the loader passes it
	// over, and so is it.
	exe, err := os.ReadFile("/bin/true")
	if err != nil {
		t.Fatal(err)
	}
	build := filepath.Join(dir, "build")
	if err := os.Mkdir(build, 0o755); err != nil {
		t.Fatal(err)
	}
	compile(t, filepath.Join(build, "libnotes.so"), "int notes(void) { return 0; }\n", "-shared", "-fPIC", "-Wl,-soname,libnotes.so")
	const main = "int notes(void);\nint main(void) { return notes(); }\n"
	program := filepath.Join(dir, "program")
	compile(t, program, main, "-L"+build, "-lnotes", "-Wl,--enable-new-dtags,-rpath,"+lib)
	notes := filepath.Join(lib, "libnotes.so")
	if err := os.WriteFile(notes, exe, 0o644); err != nil {
		t.Fatal(err)
	}
	if got, err := SharedLibraries(program, ""); err == nil || !strings.Contains(err.Error(), "not a shared library") {
		t.Errorf("an executable as a library: SharedLibraries = %v, %v; want it passed over, and an error", got.Files, err)
	}

	// The library itself, but another user's: refused, naming the owner.
	real, err := os.ReadFile(filepath.Join(build, "libnotes.so"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(notes, real, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := SharedLibraries(program, ""); err != nil {
		t.Fatalf("the library in place: %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(notes, 4321, 4321); err != nil {
			t.Fatal(err)
		}
		if _, err := SharedLibraries(program, ""); err == nil || !strings.Contains(err.Error(), "uid 4321") {
			t.Errorf("another user's library: %v; want refused naming uid 4321", err)
		}
		if err := os.Chown(notes, 0, 0); err != nil {
			t.Fatal(err)
		}
	}
	// Writable by others, or reached through a symbolic link: refused.
	if err := os.Chmod(notes, 0o666); err != nil {
		t.Fatal(err)
	}
	if _, err := SharedLibraries(program, ""); err == nil || !strings.Contains(err.Error(), "writable by others") {
		t.Errorf("a library others can write: %v; want refused", err)
	}
	if err := os.Chmod(notes, 0o644); err != nil {
		t.Fatal(err)
	}
	linked := filepath.Join(dir, "linked")
	if err := os.Symlink(lib, linked); err != nil {
		t.Fatal(err)
	}
	viaLink := filepath.Join(dir, "via-link")
	compile(t, viaLink, main, "-L"+build, "-lnotes", "-Wl,--enable-new-dtags,-rpath,"+linked)
	if _, err := SharedLibraries(viaLink, ""); err == nil || !strings.Contains(err.Error(), "not a directory") {
		t.Errorf("a search path through a symbolic link: %v; want refused", err)
	}

	// The program's own DT_SONAME answers a need for that name: nothing is
	// looked up for it.
	self := filepath.Join(dir, "self")
	compile(t, self, main, "-L"+build, "-lnotes", "-Wl,-soname,libnotes.so", "-Wl,--enable-new-dtags,-rpath,"+lib)
	if got, err := SharedLibraries(self, ""); err != nil || slices.Contains(got.Files, notes) {
		t.Errorf("a program named libnotes.so: SharedLibraries = %v, %v; want libnotes.so not looked up", got.Files, err)
	}

	// Without PT_INTERP the kernel runs the program itself: no loader reads
	// its dynamic segment, and nothing is bound.
	data, err := os.ReadFile(program)
	if err != nil {
		t.Fatal(err)
	}
	le := binary.LittleEndian
	phoff, phnum := le.Uint64(data[0x20:]), int(le.Uint16(data[0x38:]))
	for i := range phnum {
		if ph := data[phoff+uint64(i)*56:]; elf.ProgType(le.Uint32(ph)) == elf.PT_INTERP {
			le.PutUint32(ph, uint32(elf.PT_NULL))
		}
	}
	static := filepath.Join(dir, "no-interp")
	if err := os.WriteFile(static, data, 0o755); err != nil {
		t.Fatal(err)
	}
	if got, err := SharedLibraries(static, ""); err != nil || len(got.Files) != 0 {
		t.Errorf("a program without PT_INTERP: SharedLibraries = %v, %v; want nothing", got.Files, err)
	}
}

// A search path is read once an object, its repeats dropped, and bounded.
func TestSearchPathIsBounded(t *testing.T) {
	obj := &loadedObject{elfDynamic: elfDynamic{path: "p", rpath: slices.Repeat([]string{"/usr/lib", "/", ""}, 2000)}, origin: "/o", runsIn: "/o"}
	if err := obj.searchPath(); err != nil || !slices.Equal(obj.ownPath, []string{"/usr/lib", "/"}) {
		t.Errorf("a repeated search path: %q, %v; want two directories", obj.ownPath, err)
	}
	var many []string
	for i := range maxSearchDirs + 1 {
		many = append(many, fmt.Sprintf("/d%d", i))
	}
	obj = &loadedObject{elfDynamic: elfDynamic{path: "p", runpath: many, hasRunpath: true}, origin: "/o", runsIn: "/o"}
	if err := obj.searchPath(); err == nil {
		t.Errorf("a search path of %d directories: no error", len(many))
	}
}

func TestExpandOrigin(t *testing.T) {
	for _, c := range []struct{ entry, want string }{
		{"$ORIGIN", "/o"},
		{"${ORIGIN}/../lib", "/o/../lib"},
		{"/a/$ORIGIN/b:c", "/a//o/b:c"},
		{"/plain", "/plain"},
		{"$ORIGINX", ""}, // another token, as glibc reads it
		{"$LIB", ""},
		{"${PLATFORM}", ""},
		{"${ORIGIN", ""},
	} {
		got, err := expandOrigin(c.entry, "/o")
		if c.want == "" {
			if err == nil {
				t.Errorf("expandOrigin(%q) = %q; want an error", c.entry, got)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("expandOrigin(%q) = %q, %v; want %q", c.entry, got, err, c.want)
		}
	}
}
