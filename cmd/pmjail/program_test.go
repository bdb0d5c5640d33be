package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// `run DIR` takes a directory's regular files, dot files left out, picks
// the default entry and its runtime, and refuses what the job could not
// carry with a message that says what to do.
func TestDirectoryProgram(t *testing.T) {
	dir := t.TempDir()
	for p, text := range map[string]string{"main.py": "import util", "util.py": "", "pkg/mod.py": "", ".git/config": "x", ".env": "SECRET=1"} {
		path := filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f := newRunFlags("run", false)
	req, err := f.programRequest([]string{"--no-stdin", "--env", "A=1", "--env", "B=x=y", dir})
	if err != nil {
		t.Fatal(err)
	}
	if req.Runtime != "python" || req.Entry != "" || len(req.Files) != 3 || req.Files["main.py"] != "import util" || req.Source != "" {
		t.Fatalf("request: runtime %q entry %q files %v source %q", req.Runtime, req.Entry, req.Files, req.Source)
	}
	if _, ok := req.Files["pkg/mod.py"]; !ok {
		t.Errorf("files %v lack pkg/mod.py", req.Files)
	}
	if req.Env["A"] != "1" || req.Env["B"] != "x=y" {
		t.Errorf("env %v", req.Env)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--entry", "app.ts", dir}, ""}, // refused by the job: not a file of it
		{[]string{"--env", "A=1", "--env", "A=2", dir}, "--env: A given twice"},
		{[]string{"--env", "=1", dir}, `--env "=1": want NAME=VALUE`},
		{[]string{"--entry", "main.py", filepath.Join(dir, "main.py")}, "--entry: names a file of a DIR, and the program is one file"},
		{[]string{filepath.Join(dir, "pkg")}, "holds none of main.ts, main.tsx, main.js, main.jsx, main.mjs, main.py: name the file that runs with --entry"},
		// A missing DIR (or a missing FILE without an extension) is named as
		// missing, not as a program of an unknown runtime.
		{[]string{filepath.Join(dir, "app") + "/"}, "app/: no such file or directory"},
		{[]string{filepath.Join(dir, "nothere")}, "nothere: no such file or directory"},
	} {
		f := newRunFlags("run", false)
		_, err := f.programRequest(append([]string{"--no-stdin"}, c.args...))
		if c.want == "" {
			if err != nil {
				t.Errorf("%q: %v", c.args, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want %q", c.args, err, c.want)
		}
	}
	// A link in the tree is refused, not followed.
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "passwd")); err != nil {
		t.Fatal(err)
	}
	if _, err := newRunFlags("run", false).programRequest([]string{"--no-stdin", dir}); err == nil || !strings.Contains(err.Error(), "not a regular file") {
		t.Errorf("a symlink in DIR: %v", err)
	}
}

// --entry's help names every default entry `run DIR` looks for.
func TestEntryHelpNamesDefaults(t *testing.T) {
	usage := newRunFlags("run", false).fs.Lookup("entry").Usage
	for _, name := range api.DefaultEntries {
		if !strings.Contains(usage, name) {
			t.Errorf("--entry's help %q leaves out %s", usage, name)
		}
	}
}
