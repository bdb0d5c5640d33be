package integration

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
)

// A four-file TypeScript job: a relative import beside the entry and one
// in a subdirectory; the files are read-only to the guest, a relative
// path names one (the working directory is the job's), and a directory
// of them lists.
var tsJob = map[string]string{
	"main.ts": `import { greet } from "./util.ts";
import { twice } from "./lib/math.ts";
let ro = "written";
try { Deno.writeTextFileSync("/job/util.ts", "x"); } catch (e) { ro = "read-only " + e.name; }
const data = Deno.readTextFileSync("data/word.txt").trim();
const listed = [...Deno.readDirSync("data")].map((e) => e.name).join(",");
console.log(greet("ts"), twice(21), ro, data, Deno.cwd(), listed);
`,
	"data/word.txt": "relative\n",
	"util.ts":       "export function greet(name: string): string { return `hello ${name}`; }\n",
	"lib/math.ts":   "export const twice = (x: number): number => x * 2;\n",
}

const tsJobOut = "hello ts 42 read-only NotCapable relative /job word.txt\n"

// A two-module Python job and a package whose module imports its sibling
// relatively; the files are read-only there too, and a relative path
// names one.
var pyJob = map[string]string{
	"main.py": `import util
from pkg.mod import value
try:
    open("/job/util.py", "w").write("x")
    ro = "written"
except OSError as e:
    ro = "read-only " + type(e).__name__
import os
with open("data/word.txt") as f:
    data = f.read().strip()
print(util.greet("py"), value(), ro, data, os.getcwd(), ",".join(os.listdir("data")))
`,
	"data/word.txt":   "relative\n",
	"util.py":         "def greet(name):\n    return 'hello ' + name\n",
	"pkg/__init__.py": "",
	"pkg/mod.py":      "from .lib import x\n\ndef value():\n    return x * 2\n",
	"pkg/lib.py":      "x = 21\n",
}

const pyJobOut = "hello py 42 read-only PermissionError relative /job word.txt\n"

// writeTree writes files below a new directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, text := range files {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, path, text)
	}
	return dir
}

// Several-file jobs run through the CLI (`pmjail run DIR`) and through
// the daemon (the job's files, and `pmjail submit DIR`); a path that would
// leave the job's directory is refused before any run, with a 400 naming
// the file and a CLI error naming the flag.
func TestJobFiles(t *testing.T) {
	tsDir, pyDir := writeTree(t, tsJob), writeTree(t, pyJob)
	for _, c := range []struct{ dir, want string }{{tsDir, tsJobOut}, {pyDir, pyJobOut}} {
		inv := pmjailCmd(t, "", "run", c.dir)
		if inv.ExitCode != 0 || inv.Stdout != c.want {
			t.Errorf("run %s: exit %d stdout %q stderr %q, want %q", filepath.Base(c.dir), inv.ExitCode, inv.Stdout, inv.Stderr, c.want)
		}
	}
	// --entry picks another file; the runtime follows its extension.
	inv := pmjailCmd(t, "", "run", "--entry", "util.py", pyDir)
	if inv.ExitCode != 0 || inv.Stdout != "" || inv.Stderr != "" {
		t.Errorf("run --entry util.py: exit %d stdout %q stderr %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	inv = pmjailCmd(t, "", "run", "--entry", "../main.ts", tsDir)
	if want := "pmjail: run: --entry: \"../main.ts\": \"..\" segment: paths are relative to the job's directory and stay inside it\n"; inv.ExitCode != 125 || inv.Stderr != want {
		t.Errorf("run --entry ../main.ts: exit %d stderr %q, want 125 and %q", inv.ExitCode, inv.Stderr, want)
	}

	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	for _, c := range []struct {
		runtime string
		files   map[string]string
		want    string
	}{{"typescript", tsJob, tsJobOut}, {"python", pyJob, pyJobOut}} {
		res, err := d.c.Run(ctx, &api.Job{Runtime: c.runtime, Files: c.files})
		if err != nil {
			t.Fatal(err)
		}
		if res.Status != api.StatusOK || res.Stdout != c.want {
			t.Errorf("%s files through the daemon: %s stdout %q stderr %q %+v", c.runtime, res.Status, res.Stdout, res.Stderr, res.Error)
		}
		dir := tsDir
		if c.runtime == "python" {
			dir = pyDir
		}
		inv := pmjailCmd(t, "", "submit", "--socket", d.sock, dir)
		if inv.ExitCode != 0 || inv.Stdout != c.want {
			t.Errorf("submit %s: exit %d stdout %q stderr %q", c.runtime, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
	}
	for _, c := range []struct{ path, msg string }{
		{"../x.ts", `files["../x.ts"]: ".." segment: paths are relative to the job's directory and stay inside it`},
		{"lib/../../x.ts", `files["lib/../../x.ts"]: ".." segment: paths are relative to the job's directory and stay inside it`},
		{"/etc/passwd", `files["/etc/passwd"]: absolute path: want one relative to the job's directory`},
	} {
		files := maps.Clone(tsJob)
		files[c.path] = "export {}"
		_, err := d.c.Run(ctx, &api.Job{Runtime: "ts", Files: files})
		var apiErr *client.Error
		if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != fmt.Sprintf("files[%q]", c.path) || apiErr.Message != c.msg {
			t.Errorf("files[%q]: %v, want a 400 naming the file: %s", c.path, err, c.msg)
		}
	}
	inv = pmjailCmd(t, "", "submit", "--socket", d.sock, "--entry", "/job/main.ts", tsDir)
	if want := "pmjail: submit: --entry: \"/job/main.ts\": absolute path: want one relative to the job's directory\n"; inv.ExitCode != 125 || inv.Stderr != want {
		t.Errorf("submit --entry /job/main.ts: exit %d stderr %q, want 125 and %q", inv.ExitCode, inv.Stderr, want)
	}
}

// stdin reaches a script, a Python program and a native one byte for
// byte; env adds to an environment that holds nothing of the host's; a
// reserved or malformed name is refused before the run.
func TestJobStdinEnv(t *testing.T) {
	dir := t.TempDir()
	js := filepath.Join(dir, "stdin.js")
	writeFile(t, js, `const b = new Uint8Array(await new Response(Deno.stdin.readable).arrayBuffer());
console.log(b.length, b[0], b[255], Deno.env.get("GREETING"));`)
	py := filepath.Join(dir, "stdin.py")
	writeFile(t, py, "import os, sys\nb = sys.stdin.buffer.read()\nprint(len(b), b[0], b[255], os.environ.get('GREETING'), 'PATH' in os.environ)\n")
	for _, c := range []struct{ file, want string }{
		{js, "256 0 255 hi there\n"},
		{py, "256 0 255 hi there True\n"},
	} {
		inv := pmjailCmd(t, string(allBytes(false)), "run", "--env", "GREETING=hi there", c.file)
		if inv.ExitCode != 0 || inv.Stdout != c.want {
			t.Errorf("run %s < 256 bytes: exit %d stdout %q stderr %q, want %q", filepath.Base(c.file), inv.ExitCode, inv.Stdout, inv.Stderr, c.want)
		}
	}
	// A native program reads the bytes as they are and writes them back;
	// its whole environment is pmjail's three names and the job's.
	inv := pmjailCmd(t, string(allBytes(false)), "exec", "--", "cat")
	if inv.ExitCode != 0 || inv.Stdout != string(allBytes(false)) {
		t.Errorf("exec cat < 256 bytes: exit %d, stdout %q", inv.ExitCode, inv.Stdout)
	}
	inv = pmjailCmd(t, "", "exec", "--env", "GREETING=hi", "--", "env")
	if want := "PATH=/usr/local/bin:/usr/bin:/bin\nHOME=/tmp\nLANG=C.UTF-8\nGREETING=hi\n"; inv.ExitCode != 0 || inv.Stdout != want {
		t.Errorf("exec env: exit %d stdout %q stderr %q, want %q", inv.ExitCode, inv.Stdout, inv.Stderr, want)
	}
	// The host's environment never reaches a guest: pmjail itself runs
	// with a variable set, and each guest tries to read it (harmless if
	// the jail fails: it only prints what it finds).
	for _, c := range []struct{ name, src, want string }{
		{"env.js", `import process from "node:process";
const tries = [];
for (const f of [() => Deno.env.get("HOST_SECRET"), () => Deno.env.toObject(), () => Deno.env.get("HOME"), () => process.env.HOST_SECRET, () => process.env.NODE_ENV]) {
  try { tries.push(String(f())); } catch (e) { tries.push(e.name); }
}
console.log(tries.join(" "), Deno.env.get("GREETING"));`, "NotCapable NotCapable NotCapable NotCapable undefined hi\n"},
		{"env.py", "import os\nprint(sorted(os.environ), os.environ['GREETING'])\n", "['GREETING', 'HOME', 'LANG', 'PATH', 'TMPDIR'] hi\n"},
	} {
		path := filepath.Join(dir, c.name)
		writeFile(t, path, c.src)
		cmd := exec.Command(pmjail, "run", "--env", "GREETING=hi", path)
		cmd.Env = append(os.Environ(), "HOST_SECRET=s3cret")
		out, err := cmd.Output()
		if err != nil || string(out) != c.want {
			t.Errorf("%s with HOST_SECRET in pmjail's environment: %q (%v), want %q", c.name, out, err, c.want)
		}
	}
	// NODE_ENV, which npm packages read as they load, is the job's to set
	// (and unset, not refused, when it does not: see above), though every
	// other NODE_* name is reserved.
	nodeEnv := filepath.Join(dir, "node_env.js")
	writeFile(t, nodeEnv, `import process from "node:process"; console.log(process.env.NODE_ENV);`)
	if inv := pmjailCmd(t, "", "run", "--env", "NODE_ENV=production", nodeEnv); inv.ExitCode != 0 || inv.Stdout != "production\n" {
		t.Errorf("run --env NODE_ENV=production: exit %d stdout %q stderr %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	// Without stdin given, or with --no-stdin, the program reads nothing.
	inv = pmjailCmd(t, "abc", "exec", "--no-stdin", "--", "cat")
	if inv.ExitCode != 0 || inv.Stdout != "" {
		t.Errorf("exec --no-stdin cat: exit %d stdout %q", inv.ExitCode, inv.Stdout)
	}
	for _, c := range []struct {
		env, want string
	}{
		{"PATH=/tmp", "pmjail: run: --env: env.PATH: reserved: pmjail sets it, or it redirects what the runtime does"},
		{"LD_PRELOAD=/tmp/x.so", "pmjail: run: --env: env.LD_PRELOAD: reserved: LD_* names configure the runtime or the loader"},
		{"DENO_DIR=/tmp", "pmjail: run: --env: env.DENO_DIR: reserved: DENO_* names configure the runtime or the loader"},
		{"NODE_OPTIONS=--require=/tmp/x", "pmjail: run: --env: env.NODE_OPTIONS: reserved: NODE_* names configure the runtime or the loader"},
		{"node_env=production", "pmjail: run: --env: env.node_env: reserved: NODE_* names configure the runtime or the loader"},
		{"2X=1", `pmjail: run: --env: env: name "2X": want 1 to 128 bytes of [A-Za-z_][A-Za-z0-9_]*`},
		{"NOVALUE", `pmjail: run: --env "NOVALUE": want NAME=VALUE`},
	} {
		inv := pmjailCmd(t, "", "run", "--env", c.env, js)
		if inv.ExitCode != 125 || !strings.HasPrefix(inv.Stderr, c.want+"\n") {
			t.Errorf("run --env %s: exit %d stderr %q, want 125 and %q", c.env, inv.ExitCode, inv.Stderr, c.want)
		}
	}

	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	src, err := os.ReadFile(py)
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.c.Run(ctx, &api.Job{Runtime: "python", Source: string(src),
		Stdin: base64.StdEncoding.EncodeToString(allBytes(false)), StdinEncoding: api.EncodingBase64,
		Env: map[string]string{"GREETING": "hi"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != api.StatusOK || res.Stdout != "256 0 255 hi True\n" {
		t.Errorf("python with stdin and env through the daemon: %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	res, err = d.c.Run(ctx, &api.Job{Runtime: "deno", Source: `console.log(await new Response(Deno.stdin.readable).text(), Deno.env.get("A"))`,
		Stdin: "text in", Env: map[string]string{"A": "b"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Status != api.StatusOK || res.Stdout != "text in b\n" {
		t.Errorf("deno with stdin and env through the daemon: %s stdout %q stderr %q", res.Status, res.Stdout, res.Stderr)
	}
	// submit passes its own stdin and --env on, as run does.
	inv = pmjailCmd(t, string(allBytes(false)), "submit", "--socket", d.sock, "--env", "GREETING=sent", js)
	if inv.ExitCode != 0 || inv.Stdout != "256 0 255 sent\n" {
		t.Errorf("submit < 256 bytes: exit %d stdout %q stderr %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	_, err = d.c.Run(ctx, &api.Job{Runtime: "deno", Source: "1", Env: map[string]string{"NODE_OPTIONS": "--require=/tmp/x"}})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 400 || apiErr.Field != "env.NODE_OPTIONS" ||
		apiErr.Message != "env.NODE_OPTIONS: reserved: NODE_* names configure the runtime or the loader" {
		t.Errorf("env NODE_OPTIONS: %v, want a 400 naming env.NODE_OPTIONS", err)
	}
}

// Output that is not UTF-8 reaches every reader as the bytes written: the
// CLI passes it through, the result carries it in base64 with its
// encoding, and so do the chunks of an event stream.
func TestBinaryOutput(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "bytes.js")
	src := `const all = Uint8Array.from({length: 256}, (_, i) => i);
Deno.stdout.writeSync(all); Deno.stderr.writeSync(all.slice().reverse());`
	writeFile(t, script, src)
	want, rev := allBytes(false), allBytes(false)
	for i := range rev {
		rev[i] = byte(255 - i)
	}
	inv := pmjailCmd(t, "", "run", script)
	if inv.ExitCode != 0 || inv.Stdout != string(want) || inv.Stderr != string(rev) {
		t.Errorf("run: exit %d, stdout %q stderr %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	inv = pmjailCmd(t, "", "run", "--json", script)
	var wire struct {
		Stdout, Stderr string
		Encoding       map[string]string
	}
	if err := json.Unmarshal([]byte(inv.Stdout), &wire); err != nil {
		t.Fatalf("run --json: %v\n%s", err, inv.Stdout)
	}
	if wire.Encoding["stdout"] != api.EncodingBase64 || wire.Stdout != base64.StdEncoding.EncodeToString(want) ||
		wire.Encoding["stderr"] != api.EncodingBase64 || wire.Stderr != base64.StdEncoding.EncodeToString(rev) {
		t.Errorf("run --json: stdout %q stderr %q encoding %v, want both in base64", wire.Stdout, wire.Stderr, wire.Encoding)
	}
	var res api.Result
	if err := json.Unmarshal([]byte(inv.Stdout), &res); err != nil {
		t.Fatalf("run --json: %v\n%s", err, inv.Stdout)
	}
	checkBinary(t, "run --json", &res, want, rev)

	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 2, 4, "0660"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	got, err := d.c.Run(ctx, &api.Job{Runtime: "deno", Source: src})
	if err != nil {
		t.Fatal(err)
	}
	checkBinary(t, "daemon", got, want, rev)
	got, err = d.c.Run(ctx, &api.Job{Runtime: "python",
		Source: "import sys\nsys.stdout.buffer.write(bytes(range(256)))\nsys.stderr.buffer.write(bytes(range(255, -1, -1)))\n"})
	if err != nil {
		t.Fatal(err)
	}
	checkBinary(t, "daemon, python", got, want, rev)
	var streamed [2][]byte
	got, err = d.c.Stream(ctx, &api.Job{Runtime: "deno", Source: src}, func(ev api.Event) {
		b := []byte(ev.Data) // decoded from base64 (the checked transport holds the wire to the schema)
		switch ev.Type {
		case api.EventStdout:
			streamed[0] = append(streamed[0], b...)
		case api.EventStderr:
			streamed[1] = append(streamed[1], b...)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	checkBinary(t, "stream result", got, want, rev)
	if !bytes.Equal(streamed[0], want) || !bytes.Equal(streamed[1], rev) {
		t.Errorf("stream chunks: stdout %q stderr %q", streamed[0], streamed[1])
	}
	inv = pmjailCmd(t, "", "submit", "--socket", d.sock, script)
	if inv.ExitCode != 0 || inv.Stdout != string(want) || inv.Stderr != string(rev) {
		t.Errorf("submit: exit %d, stdout %q stderr %q", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
}

func checkBinary(t *testing.T, what string, res *api.Result, stdout, stderr []byte) {
	t.Helper()
	if res.Status != api.StatusOK || res.Encoding.Stdout != api.EncodingBase64 || res.Encoding.Stderr != api.EncodingBase64 {
		t.Errorf("%s: status %s encoding %+v, want ok and base64 for both", what, res.Status, res.Encoding)
	}
	if res.Stdout != string(stdout) || res.Stderr != string(stderr) {
		t.Errorf("%s: decoded stdout %q stderr %q", what, res.Stdout, res.Stderr)
	}
}
