package integration

import (
	"encoding/json"
	"strings"
	"testing"
)

// One Python run (Pyodide starts slowly) batches the probes.
func TestSecurityFilesystem_Python(t *testing.T) {
	r := runScript(t, "hostile.py", `
import json, os, socket
out = {}
def probe(name, f):
    try:
        out[name] = {"ok": True, "value": repr(f())[:100]}
    except BaseException as e:
        out[name] = {"ok": False, "name": type(e).__name__, "message": str(e)[:200]}
probe("read_passwd", lambda: open("/etc/passwd").read())
probe("read_proc1_root", lambda: open("/proc/1/root/etc/passwd").read())
probe("listdir_root", lambda: os.listdir("/"))
probe("system", lambda: os.system("echo pwned > /tmp/x"))
probe("env", lambda: dict(os.environ))
probe("socket", lambda: socket.create_connection(("127.0.0.1", 22), timeout=1))
print(json.dumps(out))
`)
	if r.Status != "ok" {
		t.Fatalf("status %s error %+v stderr %q", r.Status, r.Error, r.Stderr)
	}
	var rep map[string]struct {
		OK    bool   `json:"ok"`
		Value string `json:"value"`
		Name  string `json:"name"`
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &rep); err != nil {
		t.Fatalf("report %q: %v", r.Stdout, err)
	}
	for _, p := range []string{"read_passwd", "read_proc1_root", "socket"} {
		if rep[p].OK {
			t.Errorf("%s succeeded: %+v", p, rep[p])
		}
	}
	if s := rep["system"]; s.OK && s.Value == "0" {
		t.Errorf("os.system ran a command: %+v", s)
	}
	if e := rep["env"]; e.OK && (strings.Contains(e.Value, "PMJAIL_RUNTIME_DIR") || strings.Contains(e.Value, "/root")) {
		t.Errorf("os.environ leaks the host: %s", e.Value)
	}
	t.Logf("python report: %s", lines[len(lines)-1])
}
