// Command cprograms compiles the C programs TestRootLibraries_SearchPaths
// runs in a job into one directory (-out): programs whose libraries only
// their own search paths lead the loader to, one whose DT_RUNPATH leads
// to a host file that is not a library, and one needing a library only
// /etc/ld.so.conf.d names (left out where the host has none).
//
// The test runs it with the host's cc; where there is no C compiler (the
// cgroup v2 VM), `make test-vm` runs it ahead, as it builds the prober,
// and the test takes the directory from PMJAIL_CPROGRAMS. DT_RUNPATH
// names an absolute path, so the directory must be at the same path where
// the programs run.
package main

import (
	"debug/elf"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// Conf is the name of the program needing an ld.so.conf.d-only library.
const Conf = "conf"

func main() {
	out := flag.String("out", "", "directory to compile the programs into (made if absent)")
	flag.Parse()
	if *out == "" || !filepath.IsAbs(*out) {
		fmt.Fprintln(os.Stderr, "cprograms: -out must be an absolute directory")
		os.Exit(2)
	}
	if err := build(*out); err != nil {
		fmt.Fprintln(os.Stderr, "cprograms:", err)
		os.Exit(1)
	}
}

// step is one program or library: its source and cc's flags.
type step struct {
	out, source string
	flags       []string
}

const greetMain = `void greet(const char *);
int main(int argc, char **argv) { greet(argv[1]); return 0; }
`

func build(dir string) error {
	lib := filepath.Join(dir, "lib")
	link := filepath.Join(dir, "build")
	for _, d := range []string{dir, lib, link} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
		// Readable by the job's unprivileged ids, as a program's path must be.
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
	}
	steps := []step{
		{filepath.Join(lib, "libgreet.so"), "#include <stdio.h>\nvoid greet(const char *how) { printf(\"greeted by %s\\n\", how); }\n",
			[]string{"-shared", "-fPIC", "-Wl,-soname,libgreet.so"}},
		// DT_RUNPATH to an absolute directory, DT_RPATH with $ORIGIN.
		{filepath.Join(dir, "runpath"), greetMain, []string{"-L" + lib, "-lgreet", "-Wl,--enable-new-dtags,-rpath," + lib}},
		{filepath.Join(dir, "rpath-origin"), greetMain, []string{"-L" + lib, "-lgreet", "-Wl,--disable-new-dtags,-rpath,$ORIGIN/lib"}},
		// A DT_RUNPATH of /etc and a needed "passwd", which only the link
		// step finds in build/.
		{filepath.Join(link, "passwd"), "int pw(void) { return 0; }\n", []string{"-shared", "-fPIC", "-Wl,-soname,passwd"}},
		{filepath.Join(dir, "etc-runpath"), "int pw(void);\nint main(void) { return pw(); }\n",
			[]string{"-L" + link, "-l:passwd", "-Wl,--enable-new-dtags,-rpath,/etc"}},
	}
	if confLib := confOnlyLibrary(); confLib != "" {
		steps = append(steps, step{filepath.Join(dir, Conf), "#include <stdio.h>\nint main(void) { puts(\"loaded\"); return 0; }\n",
			[]string{"-L" + filepath.Dir(confLib), "-Wl,--no-as-needed", "-l:" + filepath.Base(confLib)}})
	}
	for _, s := range steps {
		if err := compile(s.out, s.source, s.flags...); err != nil {
			return err
		}
	}
	return nil
}

// compile builds a C source into out with the host's cc.
func compile(out, source string, flags ...string) error {
	src := out + ".c"
	if err := os.WriteFile(src, []byte(source), 0o644); err != nil {
		return err
	}
	args := append([]string{"-o", out, src}, flags...)
	if b, err := exec.Command("cc", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("cc %s: %w\n%s", strings.Join(args, " "), err, b)
	}
	return nil
}

// systemLibraryDirs are the directories pmjail searches before the ones
// /etc/ld.so.conf.d names (the jail package's default library directories).
var systemLibraryDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// confOnlyLibrary returns a library, named by its DT_SONAME, in a
// directory /etc/ld.so.conf.d names and the loader's system directories
// do not hold; "" if there is none.
func confOnlyLibrary() string {
	inSystemLibraryDirs := func(name string) bool {
		for _, dir := range systemLibraryDirs {
			if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
				return true
			}
		}
		return false
	}
	confs, _ := filepath.Glob("/etc/ld.so.conf.d/*.conf")
	for _, conf := range confs {
		data, err := os.ReadFile(conf)
		if err != nil {
			continue
		}
		for _, dir := range strings.Fields(string(data)) {
			if !filepath.IsAbs(dir) || slices.Contains(systemLibraryDirs, dir) {
				continue
			}
			libs, _ := filepath.Glob(filepath.Join(dir, "lib*.so*"))
			for _, lib := range libs {
				f, err := elf.Open(lib)
				if err != nil {
					continue
				}
				soname, _ := f.DynString(elf.DT_SONAME)
				f.Close()
				if len(soname) == 1 && soname[0] == filepath.Base(lib) && !inSystemLibraryDirs(soname[0]) {
					return lib
				}
			}
		}
	}
	return ""
}
