package integration

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestE2E_HelloJSON(t *testing.T) {
	r := runScript(t, "hello.js", `console.log("hello from the jail");`)
	if r.Status != "ok" || r.ExitCode != 0 || r.Stdout != "hello from the jail\n" || r.Usage.WallMS <= 0 {
		t.Fatalf("got status %s exit %d stdout %q wall %d, want ok 0 hello and wall > 0", r.Status, r.ExitCode, r.Stdout, r.Usage.WallMS)
	}
}

func TestE2E_TypeScript(t *testing.T) {
	r := runScript(t, "typed.ts", `
interface Point { x: number; y: number }
function norm1(p: Point): number { return Math.abs(p.x) + Math.abs(p.y); }
const p: Point = { x: -3, y: 4 };
console.log(norm1(p) as number);
`)
	if r.Status != "ok" || r.Stdout != "7\n" {
		t.Fatalf("got %s %q (error %+v), want ok 7", r.Status, r.Stdout, r.Error)
	}
}

func TestE2E_HandlerValueRoundTrip(t *testing.T) {
	input := `{"name":"Zoë 😀","list":[1,2.5,-3e10,null,true],"nested":{"a":{"b":"ü"}}}`
	path := filepath.Join(t.TempDir(), "handler.js")
	src := `export default async (input, ctx) => ({ echo: input, same: ctx.input === input, n: 0.1 + 0.2, big: 2 ** 53, arr: [1, "é😀", null, { k: [] }], s: "ünï\u0000code" });`
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	inv := pmjailCmd(t, "", "run", "--json", "--input", input, path)
	r := inv.Result
	if r == nil || r.Status != "ok" {
		t.Fatalf("no ok result: %+v %s", r, inv.Stderr)
	}
	var got, want any
	if err := json.Unmarshal(r.Value, &got); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(`{"echo":`+input+`,"same":true,"n":0.30000000000000004,"big":9007199254740992,"arr":[1,"é😀",null,{"k":[]}],"s":"ünï\u0000code"}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("value %s, want %v", r.Value, want)
	}
}

func TestE2E_ExitCode(t *testing.T) {
	src := "console.log(\"before exit\");\nDeno.exit(3);\n"
	r := runScript(t, "exit.js", src)
	if r.Status != "error" && r.Status != "ok" || r.ExitCode != 3 {
		t.Errorf("json: status %s exit %d, want exit_code 3", r.Status, r.ExitCode)
	}
	path := filepath.Join(t.TempDir(), "exit.js")
	os.WriteFile(path, []byte(src), 0o644)
	inv := pmjailCmd(t, "", "run", path)
	if inv.ExitCode != 3 || inv.Stdout != "before exit\n" {
		t.Errorf("pass-through: exit %d stdout %q, want 3 and the guest's output", inv.ExitCode, inv.Stdout)
	}
	inv = pmjailCmd(t, "", "run", "--json", path)
	if inv.ExitCode != 3 {
		t.Errorf("--json: CLI exit %d, want 3", inv.ExitCode)
	}
}

func TestE2E_ThrowReportsStack(t *testing.T) {
	r := runScript(t, "throw.js", "const x = 1;\n\nfunction f() {\n  throw new Error(\"boom at line four\");\n}\nf();\n")
	if r.Status != "error" || r.Error == nil {
		t.Fatalf("status %s error %+v, want error", r.Status, r.Error)
	}
	if r.Error.Message != "boom at line four" || !strings.Contains(r.Error.Stack, "/job/main.js:4:") {
		t.Fatalf("error %+v, want the message and a stack at /job/main.js:4", r.Error)
	}
	if r.ExitCode == 0 {
		t.Errorf("exit code 0 for a throwing script")
	}
}

func TestE2E_Timeout(t *testing.T) {
	path := filepath.Join(t.TempDir(), "loop.js")
	os.WriteFile(path, []byte("for (;;) {}\n"), 0o644)
	start := time.Now()
	inv := pmjailCmd(t, "", "run", "--json", "--timeout", "2s", path)
	el := time.Since(start)
	r := inv.Result
	if r == nil || r.Status != "timeout" || inv.ExitCode != 124 {
		t.Fatalf("result %+v exit %d, want timeout and 124", r, inv.ExitCode)
	}
	if r.Usage.WallMS < 2000 || r.Usage.WallMS > 4000 || el > 5*time.Second {
		t.Errorf("wall %d ms (elapsed %v), want 2000..4000", r.Usage.WallMS, el)
	}
}

func TestE2E_OutputLimit(t *testing.T) {
	path := filepath.Join(t.TempDir(), "flood.js")
	os.WriteFile(path, []byte(`const s = "0123456789".repeat(100); for (;;) console.log(s);`), 0o644)
	inv := pmjailCmd(t, "", "run", "--json", "--output-limit", "10K", path)
	r := inv.Result
	if r == nil || r.Status != "output_limit" || inv.ExitCode != 124 {
		t.Fatalf("result %+v exit %d, want output_limit and 124", r, inv.ExitCode)
	}
	if len(r.Stdout) != 10240 || !r.Truncated.Stdout || r.Truncated.Stderr {
		t.Errorf("stdout %d bytes truncated %+v, want exactly 10240 and stdout truncated", len(r.Stdout), r.Truncated)
	}
	inv = pmjailCmd(t, "", "run", "--output-limit", "10K", path)
	if inv.ExitCode != 124 || len(inv.Stdout) != 10240 {
		t.Errorf("pass-through: exit %d, %d bytes, want 124 and 10240", inv.ExitCode, len(inv.Stdout))
	}
}

func TestE2E_BadInput(t *testing.T) {
	dir := t.TempDir()
	hello := filepath.Join(dir, "hello.js")
	os.WriteFile(hello, []byte(`console.log("should not run")`), 0o644)
	ruby := filepath.Join(dir, "x.rb")
	os.WriteFile(ruby, []byte("puts 1"), 0o644)
	big := filepath.Join(dir, "big.js")
	os.WriteFile(big, []byte("//"+strings.Repeat("x", 1<<20)), 0o644)
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"missing file", []string{"run", filepath.Join(dir, "nope.js")}, "no such file"},
		{"missing dir", []string{"run", filepath.Join(dir, "app") + "/"}, "pmjail: run: " + filepath.Join(dir, "app") + "/: no such file or directory"},
		{"unknown extension", []string{"run", ruby}, "unknown runtime"},
		{"oversize source", []string{"run", big}, "1048576"},
		{"memory 12Q", []string{"run", "--memory", "12Q", hello}, `pmjail: run: --memory "12Q": invalid size "12Q"`},
		{"memory 8M", []string{"run", "--memory", "8M", hello}, "pmjail: run: --memory: 8M is below the 16M minimum"},
		{"timeout -1s", []string{"run", "--timeout", "-1s", hello}, `pmjail: run: --timeout "-1s": invalid duration "-1s"`},
		{"pids 0", []string{"run", "--pids", "0", hello}, `pmjail: run: --pids "0": want a whole number above zero`},
		{"pids many", []string{"run", "--pids", "1e3", hello}, `pmjail: run: --pids "1e3": want a whole number above zero`},
		{"mode sometimes", []string{"run", "--mode", "sometimes", hello}, `pmjail: run: --mode "sometimes": want auto or required`},
		{"runtime ruby", []string{"run", "--runtime", "ruby", hello}, `pmjail: run: --runtime "ruby": unknown runtime (want deno or python)`},
		{"unknown flag", []string{"run", "--nosuch", hello}, "pmjail: run: unknown flag --nosuch"},
		{"flag without its value", []string{"exec", "--pids"}, "pmjail: exec: --pids needs a value"},
		{"cap ftp", []string{"run", "--cap", "request=ftp://x", hello}, `pmjail: run: --cap "request=ftp://x": "ftp://x" is not a bare origin`},
		{"cap unknown", []string{"run", "--cap", "net", hello}, `pmjail: run: --cap "net": unknown capability "net"`},
		{"bad input JSON", []string{"run", "--input", "{bad", hello}, "JSON"},
		{"unknown profile", []string{"run", "--profile", "nosuch", hello}, `pmjail: run: --profile: unknown profile "nosuch"`},
		{"unknown profile json", []string{"run", "--json", "--profile", "nosuch", hello}, "nosuch"},
		{"submit --nats, no server", []string{"submit", "--nats", "nats://127.0.0.1:1", hello}, "pmjail: submit: connect to NATS nats://127.0.0.1:1: nats: no servers available for connection"},
		{"submit, no daemon", []string{"submit", "--socket", filepath.Join(dir, "none.sock"), hello}, "pmjail: submit: no connection to the daemon at " + filepath.Join(dir, "none.sock") + ": no such file or directory"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			start := time.Now()
			inv := pmjailCmd(t, "", c.args...)
			lines := strings.Split(strings.TrimRight(inv.Stderr, "\n"), "\n")
			if inv.ExitCode != 125 || len(lines) != 1 || !strings.HasPrefix(lines[0], "pmjail:") || !strings.Contains(lines[0], c.want) {
				t.Errorf("exit %d stderr %q, want 125 and one line starting pmjail: naming %q", inv.ExitCode, inv.Stderr, c.want)
			}
			if strings.Contains(inv.Stdout, "should not run") || time.Since(start) > 2*time.Second {
				t.Errorf("something ran: stdout %q after %v", inv.Stdout, time.Since(start))
			}
		})
	}
}

// Every command answers -h and --help with its usage and flags on stdout
// and exit 0, and runs nothing.
func TestE2E_CommandHelp(t *testing.T) {
	for _, c := range []struct{ cmd, flag string }{
		{"run", "--memory"}, {"exec", "--ro-bind"}, {"submit", "--socket"},
		{"posture", "--require"}, {"prepare", ""}, {"serve", "--config"}, {"packages", "--registry"},
	} {
		for _, ask := range []string{"-h", "--help"} {
			inv := pmjailCmd(t, "", c.cmd, ask)
			if inv.ExitCode != 0 || inv.Stderr != "" || !strings.HasPrefix(inv.Stdout, "usage: pmjail "+c.cmd) || !strings.Contains(inv.Stdout, c.flag) {
				t.Errorf("pmjail %s %s: exit %d stdout %q stderr %q, want 0 and a usage naming %q", c.cmd, ask, inv.ExitCode, inv.Stdout, inv.Stderr, c.flag)
			}
		}
	}
}

// The README's examples run as it says they do.
func TestExamples(t *testing.T) {
	for _, c := range []struct {
		file  string
		flags []string
		stdin string
		want  string // in stdout, or in the handler's value
	}{
		{"hello.js", nil, "", "hello from a jailed Deno"},
		{"hello.ts", nil, "", "hello from jailed TypeScript"},
		{"hello.py", nil, "", "hello from a jailed Python 3."},
		{"handler.ts", []string{"--cap", "log", "--input", `{"name":"ada"}`}, "", `"greeting":"hello, ada"`},
		{"handler.py", []string{"--cap", "log", "--input", `{"name":"ada"}`}, "", `"greeting":"hello, ada"`},
		// A DIR, its stdin and its env: `echo ada | pmjail run --env GREETING=hi examples/app/`.
		{"app/", []string{"--env", "GREETING=hi"}, "ada\n", "hi, ada\n"},
		{"app/", []string{"--no-stdin"}, "", "hello, world\n"},
	} {
		args := append([]string{"run", "--json"}, c.flags...)
		inv := pmjailCmd(t, c.stdin, append(args, filepath.Join(repoRoot, "examples", c.file))...)
		res := inv.Result
		if res == nil || res.Status != "ok" {
			t.Errorf("%s: exit %d, stdout %q stderr %q", c.file, inv.ExitCode, inv.Stdout, inv.Stderr)
			continue
		}
		var value bytes.Buffer
		_ = json.Compact(&value, res.Value)
		if !strings.Contains(res.Stdout, c.want) && !strings.Contains(value.String(), c.want) {
			t.Errorf("%s: stdout %q value %s, want %q", c.file, res.Stdout, res.Value, c.want)
		}
		if strings.HasPrefix(c.file, "handler") && (len(res.Logs) != 1 || res.Logs[0].Message != "greeting") {
			t.Errorf("%s: logs %+v, want the one greeting", c.file, res.Logs)
		}
	}
}
