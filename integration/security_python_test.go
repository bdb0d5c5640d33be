package integration

import (
	"encoding/json"
	"strings"
	"testing"
)

// One Python run (Pyodide starts slowly) batches the probes. Python's own
// file functions see Pyodide's in-memory file system, where the host's
// files are missing even unjailed: the attack goes through js.Deno, the
// loader's Deno, which reaches the real one, and must meet Deno's refusal.
func TestSecurityFilesystem_Python(t *testing.T) {
	r := runScript(t, "hostile.py", `
import json, os, socket
import js
out = {}
def probe(name, f):
    try:
        out[name] = {"ok": True, "value": repr(f())[:100]}
    except BaseException as e:
        out[name] = {"ok": False, "name": type(e).__name__, "message": str(e)[:200]}
probe("read_passwd", lambda: js.Deno.readTextFileSync("/etc/passwd"))
probe("read_proc1_root", lambda: js.Deno.readTextFileSync("/proc/1/root/etc/passwd"))
probe("list_root", lambda: [e.name for e in js.Deno.readDirSync("/")])
probe("write_tmp", lambda: js.Deno.writeTextFileSync("/tmp/pmjail-probe", "x"))
probe("command", lambda: js.Deno.Command.new("/bin/sh").outputSync())
probe("env_deno", lambda: js.Deno.env.toObject())
probe("system", lambda: os.system("echo pwned > /tmp/x"))
probe("env", lambda: dict(os.environ))
probe("socket", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
print(json.dumps(out))
`)
	if r.Status != "ok" {
		t.Fatalf("status %s error %+v stderr %q", r.Status, r.Error, r.Stderr)
	}
	var rep map[string]struct {
		OK      bool   `json:"ok"`
		Value   string `json:"value"`
		Name    string `json:"name"`
		Message string `json:"message"`
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatalf("report %q: %v", r.Stdout, err)
	}
	for _, p := range []string{"read_passwd", "read_proc1_root", "list_root", "write_tmp", "command", "env_deno"} {
		if e, ok := rep[p]; !ok || e.OK || !strings.HasPrefix(e.Message, "NotCapable:") {
			t.Errorf("%s through js.Deno: %+v (reported %v), want Deno's NotCapable refusal", p, e, ok)
		}
	}
	if s, ok := rep["system"]; !ok || s.OK && s.Value == "0" {
		t.Errorf("os.system: %+v (reported %v), want no command run", s, ok)
	}
	if e, ok := rep["env"]; !ok || e.OK && (strings.Contains(e.Value, "PMJAIL_RUNTIME_DIR") || strings.Contains(e.Value, "/root")) {
		t.Errorf("os.environ: %+v (reported %v), want nothing of the host", e, ok)
	}
	if s, ok := rep["socket"]; !ok || s.OK {
		t.Errorf("socket: %+v (reported %v), want a failure", s, ok)
	}
	t.Logf("python report: %s", lines[len(lines)-1])
}
