package job

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/runtimes"
)

// decodeAndResolve takes a job as the daemon does; the error, if any, with
// the field Refusal names.
func decodeAndResolve(body string) (*Resolved, string, error) {
	req, err := Decode(strings.NewReader(body))
	if err == nil {
		var r *Resolved
		if r, err = Resolve(req, DefaultCeiling(), false); err == nil {
			return r, "", nil
		}
	}
	_, field := Refusal(err)
	return nil, field, err
}

// Every bad files, entry, stdin or env is refused before a run, with the
// exact message a client reads and the field it names.
func TestProgramRefusals(t *testing.T) {
	manyFiles := map[string]string{}
	for i := range api.MaxFiles + 1 {
		manyFiles[fmt.Sprintf("f%d.js", i)] = "1"
	}
	manyEnv := map[string]string{}
	for i := range api.MaxEnv + 1 {
		manyEnv[fmt.Sprintf("V%d", i)] = "1"
	}
	for _, c := range []struct {
		name, body, field, msg string
	}{
		{"dot-dot", `{"runtime":"deno","files":{"main.js":"1","../x":"2"}}`,
			`files["../x"]`, `files["../x"]: ".." segment: paths are relative to the job's directory and stay inside it`},
		{"dot-dot inside", `{"runtime":"deno","files":{"main.js":"1","a/../../x":"2"}}`,
			`files["a/../../x"]`, `files["a/../../x"]: ".." segment: paths are relative to the job's directory and stay inside it`},
		{"absolute", `{"runtime":"deno","files":{"main.js":"1","/etc/passwd":"2"}}`,
			`files["/etc/passwd"]`, `files["/etc/passwd"]: absolute path: want one relative to the job's directory`},
		{"dot", `{"runtime":"deno","files":{"main.js":"1","./x.js":"2"}}`,
			`files["./x.js"]`, `files["./x.js"]: "." segment: paths are relative to the job's directory and stay inside it`},
		{"empty segment", `{"runtime":"deno","files":{"main.js":"1","a//x.js":"2"}}`,
			`files["a//x.js"]`, `files["a//x.js"]: empty path segment (a doubled or trailing '/')`},
		{"trailing slash", `{"runtime":"deno","files":{"main.js":"1","a/":"2"}}`,
			`files["a/"]`, `files["a/"]: empty path segment (a doubled or trailing '/')`},
		{"empty path", `{"runtime":"deno","files":{"main.js":"1","":"2"}}`,
			`files[""]`, `files[""]: empty path`},
		{"NUL", `{"runtime":"deno","files":{"main.js":"1","a\u0000b":"2"}}`,
			`files["a\x00b"]`, `files["a\x00b"]: holds a NUL byte`},
		{"control", `{"runtime":"deno","files":{"main.js":"1","a\nb":"2"}}`,
			`files["a\nb"]`, `files["a\nb"]: holds a control character`},
		{"file and directory", `{"runtime":"deno","files":{"main.js":"1","lib":"2","lib/x.js":"3"}}`,
			`files["lib/x.js"]`, `files["lib/x.js"]: its directory "lib" is a file of the job too`},
		{"long segment", `{"runtime":"deno","files":{"main.js":"1","` + strings.Repeat("n", 256) + `":"2"}}`,
			`files["` + strings.Repeat("n", 256) + `"]`, `files["` + strings.Repeat("n", 256) + `"]: a segment of 256 bytes is over the 255-byte cap of a file name`},
		{"no files", `{"runtime":"deno","files":{}}`, "files", "files: empty: give at least the entry's file (or use source)"},
		{"too many", `{"runtime":"deno","files":` + mustJSON(manyFiles) + `}`, "files", fmt.Sprintf("files: %d files is over the cap of %d", api.MaxFiles+1, api.MaxFiles)},
		{"too big", `{"runtime":"deno","files":{"main.js":"` + strings.Repeat("x", api.MaxFilesBytes/2) + `","b.js":"` + strings.Repeat("x", api.MaxFilesBytes/2+1) + `"}}`,
			"files", fmt.Sprintf("files: %d bytes in all is over the %d-byte cap", api.MaxFilesBytes+1, api.MaxFilesBytes)},
		{"source and files", `{"runtime":"deno","source":"1","files":{"main.js":"1"}}`, "files", "files: give source or files, not both"},
		{"no program", `{"runtime":"deno"}`, "source", "source: empty program"},
		{"no entry", `{"runtime":"deno","files":{"app.js":"1"}}`, "entry", "entry: missing: files holds no default entry for deno, so name the file to run"},
		{"python defaults only", `{"runtime":"python","files":{"main.js":"1"}}`, "entry", "entry: missing: files holds no default entry for python, so name the file to run"},
		{"two defaults", `{"runtime":"deno","files":{"main.js":"1","main.ts":"2"}}`, "entry", "entry: missing, and files holds main.ts and main.js: name the one to run"},
		{"entry absent", `{"runtime":"deno","files":{"main.js":"1"},"entry":"app.js"}`, "entry", `entry: "app.js" is not a file of the job (its files: main.js)`},
		{"entry absent of many", `{"runtime":"deno","files":{"main.js":"1","b.js":"","c.js":"","d.js":"","e.js":"","f.js":"","g.js":"","h.js":"","i.js":"","j.js":""},"entry":"a.js"}`,
			"entry", `entry: "a.js" is not a file of the job (its files: b.js, c.js, d.js, e.js, f.js, g.js, h.js, i.js and 2 more)`},
		{"entry escapes", `{"runtime":"deno","files":{"main.js":"1"},"entry":"../main.js"}`, "entry", `entry: "../main.js": ".." segment: paths are relative to the job's directory and stay inside it`},
		{"entry absolute", `{"runtime":"deno","files":{"main.js":"1"},"entry":"/job/main.js"}`, "entry", `entry: "/job/main.js": absolute path: want one relative to the job's directory`},
		{"entry of another runtime", `{"runtime":"python","files":{"main.js":"1"},"entry":"main.js"}`, "entry", `entry: "main.js" is not a python program (want .py)`},
		{"entry not a program", `{"runtime":"deno","files":{"data.json":"1"},"entry":"data.json"}`, "entry", `entry: "data.json" is not a deno program (want .js, .mjs, .jsx, .ts, .mts or .tsx)`},
		{"entry without files", `{"runtime":"deno","source":"1","entry":"main.js"}`, "entry", "entry: names a file of files, and the job has none (source is the one-file form)"},
		{"stdin encoding", `{"runtime":"deno","source":"1","stdin":"x","stdin_encoding":"hex"}`, "stdin_encoding", `stdin_encoding: "hex" (want base64, or nothing for text)`},
		{"stdin base64", `{"runtime":"deno","source":"1","stdin":"not base64!","stdin_encoding":"base64"}`, "stdin", "stdin: not valid base64: illegal base64 data at input byte 3"},
		{"stdin too big", `{"runtime":"deno","source":"1","stdin":"` + base64.StdEncoding.EncodeToString(make([]byte, api.MaxStdinBytes+1)) + `","stdin_encoding":"base64"}`,
			"stdin", fmt.Sprintf("stdin: %d bytes is over the %d-byte cap", api.MaxStdinBytes+1, api.MaxStdinBytes)},
		{"env name", `{"runtime":"deno","source":"1","env":{"1X":"v"}}`, "env", `env: name "1X": want 1 to 128 bytes of [A-Za-z_][A-Za-z0-9_]*`},
		{"env name dash", `{"runtime":"deno","source":"1","env":{"A-B":"v"}}`, "env", `env: name "A-B": want 1 to 128 bytes of [A-Za-z_][A-Za-z0-9_]*`},
		{"env PATH", `{"runtime":"deno","source":"1","env":{"PATH":"/tmp"}}`, "env.PATH", "env.PATH: reserved: pmjail sets it, or it redirects what the runtime does"},
		{"env https_proxy", `{"runtime":"deno","source":"1","env":{"https_proxy":"http://x"}}`, "env.https_proxy", "env.https_proxy: reserved: pmjail sets it, or it redirects what the runtime does"},
		{"env LD_PRELOAD", `{"runtime":"deno","source":"1","env":{"LD_PRELOAD":"/tmp/x.so"}}`, "env.LD_PRELOAD", "env.LD_PRELOAD: reserved: LD_* names configure the runtime or the loader"},
		{"env LOCPATH", `{"runtime":"deno","source":"1","env":{"LOCPATH":"/job"}}`, "env.LOCPATH", "env.LOCPATH: reserved: pmjail sets it, or it redirects what the runtime does"},
		{"env gconv_path", `{"runtime":"python","files":{"main.py":"1"},"env":{"gconv_path":"/job"}}`, "env.gconv_path", "env.gconv_path: reserved: pmjail sets it, or it redirects what the runtime does"},
		{"env DENO_DIR", `{"runtime":"deno","source":"1","env":{"deno_dir":"/tmp"}}`, "env.deno_dir", "env.deno_dir: reserved: DENO_* names configure the runtime or the loader"},
		{"env PYTHONPATH", `{"runtime":"python","source":"1","env":{"PYTHONPATH":"/tmp"}}`, "env.PYTHONPATH", "env.PYTHONPATH: reserved: PYTHON* names configure the runtime or the loader"},
		{"env value", `{"runtime":"deno","source":"1","env":{"X":"` + strings.Repeat("v", api.MaxEnvValueLen+1) + `"}}`,
			"env.X", fmt.Sprintf("env.X: %d bytes is over the %d-byte cap", api.MaxEnvValueLen+1, api.MaxEnvValueLen)},
		{"env NUL", `{"runtime":"deno","source":"1","env":{"X":"a\u0000b"}}`, "env.X", "env.X: holds a NUL byte, which no environment can carry"},
		{"env count", `{"runtime":"deno","source":"1","env":` + mustJSON(manyEnv) + `}`, "env", fmt.Sprintf("env: %d names is over the cap of %d", api.MaxEnv+1, api.MaxEnv)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, field, err := decodeAndResolve(c.body)
			if err == nil || !errors.Is(err, ErrInvalid) {
				t.Fatalf("accepted, or not a request error: %v", err)
			}
			if msg, _ := Refusal(err); msg != c.msg || field != c.field {
				t.Fatalf("refused with %q naming %q,\nwant %q naming %q", msg, field, c.msg, c.field)
			}
		})
	}
}

// What a valid several-file job runs, and how its stdin and env reach
// the launch: files under the job's directory, read-only, the entry as
// the module Deno runs, the env's names alone readable.
func TestProgramLaunch(t *testing.T) {
	r, _, err := decodeAndResolve(`{"runtime":"ts","files":{"main.ts":"import './lib/u.ts'","lib/u.ts":"export {}","data.txt":"x"},
		"stdin":"AP8=","stdin_encoding":"base64","env":{"GREETING":"hi","_n":"1"}}`)
	if err != nil {
		t.Fatal(err)
	}
	files, entry := r.Request.Program()
	if entry != "main.ts" || len(files) != 3 {
		t.Fatalf("Program: %d files, entry %q", len(files), entry)
	}
	stdin, err := r.Request.StdinBytes()
	if err != nil || string(stdin) != "\x00\xff" {
		t.Fatalf("StdinBytes: %q %v", stdin, err)
	}
	in := &runtimes.Install{DenoPath: "/bin/true", StateDir: t.TempDir()}
	l, err := in.Launch(runtimes.Guest{Runtime: r.Runtime, Files: files, Entry: entry, Env: r.Request.Env, Stdin: stdin})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range l.Files {
		if f.Mode != 0o444 {
			t.Errorf("%s: mode %v, want read-only", f.Path, f.Mode)
		}
		got[f.Path] = string(f.Data)
	}
	for p, want := range map[string]string{"/job/main.ts": "import './lib/u.ts'", "/job/lib/u.ts": "export {}", "/job/data.txt": "x", runtimes.StdinFile: "\x00\xff"} {
		if got[p] != want {
			t.Errorf("%s: %q, want %q", p, got[p], want)
		}
	}
	if l.Stdin != runtimes.StdinFile {
		t.Errorf("Launch.Stdin %q", l.Stdin)
	}
	env, boot := slices.Index(l.Args, "--allow-env=GREETING,_n,TMPDIR,NODE_ENV"), slices.Index(l.Args, runtimes.GuestDir+"/bootstrap.js")
	if n := len(l.Args); n < 3 || l.Args[n-1] != "/job/main.ts" || env < 0 || boot != n-2 || env > boot {
		t.Errorf("args %q: want --allow-env for the job's names, TMPDIR and NODE_ENV before the bootstrap, the entry last", l.Args)
	}
	if !slices.Contains(l.Env, "GREETING=hi") || !slices.Contains(l.Env, "_n=1") {
		t.Errorf("env %q lacks the job's", l.Env)
	}
	// One-file jobs keep their launch: no stdin file, and no env grant
	// but TMPDIR's and NODE_ENV's.
	r, _, err = decodeAndResolve(`{"runtime":"deno","source":"1"}`)
	if err != nil {
		t.Fatal(err)
	}
	files, entry = r.Request.Program()
	l, err = in.Launch(runtimes.Guest{Runtime: r.Runtime, Source: []byte(r.Request.Source), Files: files, Entry: entry})
	if err != nil {
		t.Fatal(err)
	}
	if l.Stdin != "" || slices.ContainsFunc(l.Args, func(a string) bool { return strings.HasPrefix(a, "--allow-env") && a != "--allow-env=TMPDIR,NODE_ENV" }) {
		t.Errorf("one-file launch: stdin %q args %q", l.Stdin, l.Args)
	}
}

// The wire carries every field of the several-file form both ways.
func TestProgramWire(t *testing.T) {
	j := &api.Job{Runtime: "python", Files: map[string]string{"main.py": "import util", "util.py": ""}, Entry: "main.py",
		Stdin: "AA==", StdinEncoding: api.EncodingBase64, Env: map[string]string{"A": "b"}}
	back, err := FromAPI(j).API()
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(back.Files, j.Files) || back.Entry != j.Entry || back.Stdin != j.Stdin ||
		back.StdinEncoding != j.StdinEncoding || !maps.Equal(back.Env, j.Env) {
		t.Fatalf("round trip: %+v, want %+v", back, j)
	}
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return string(b)
}

// A path checkFilePath accepts names a file inside the job's directory,
// exactly as given: joined and cleaned it neither moves nor leaves /job,
// which is what the init stage writes.
func FuzzFilePath(f *testing.F) {
	for _, s := range []string{"main.ts", "lib/x.ts", "../x", "a/../../b", "/etc/passwd", "a//b", "./a", "a/.", "..", ".", "", "a\x00b", "..a/b..", "a/\u2028/b", strings.Repeat("a/", 300)} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, p string) {
		if checkFilePath(p) != nil {
			return
		}
		joined := path.Join("/job", p)
		if joined != "/job/"+p || !strings.HasPrefix(joined, "/job/") {
			t.Fatalf("accepted %q, which lands at %q", p, joined)
		}
	})
}
