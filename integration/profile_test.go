package integration

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A profile the operator wrote is checked before anything runs, and the
// error names the field at fault.
func TestBadProfilesAreRefused(t *testing.T) {
	dir := t.TempDir()
	hello := filepath.Join(dir, "hello.js")
	writeFile(t, hello, `console.log("must not run")`)
	policy := filepath.Join(dir, "policy.json")
	writeFile(t, policy, `{"defaultAction":"SCMP_ACT_ERRNO","syscalls":[{"names":["read"],"action":"SCMP_ACT_FOO"}]}`)
	cases := map[string]struct{ profile, want string }{
		"unknown field": {`{"name":"x","limits":{"memory":"64M","cpu_time":"1s","timeout":"1s","pids":8,"output":"1K","tmp":"1M"},"seccomp":{"deno":"deno","python":"pyodide","native":"native"},"landlock":true,"color":"red"}`, "color: unknown field"},
		"bad limit":     {`{"name":"x","limits":{"memory":"1M","cpu_time":"1s","timeout":"1s","pids":8,"output":"1K","tmp":"1M"},"seccomp":{"deno":"deno","python":"pyodide","native":"native"}}`, "limits.memory"},
		"bad policy":    {`{"name":"x","limits":{"memory":"64M","cpu_time":"1s","timeout":"1s","pids":8,"output":"1K","tmp":"1M"},"seccomp":{"deno":"` + policy + `","python":"pyodide","native":"native"}}`, `syscalls[0].action`},
		"no policy":     {`{"name":"x","limits":{"memory":"64M","cpu_time":"1s","timeout":"1s","pids":8,"output":"1K","tmp":"1M"},"seccomp":{"deno":"deno","python":"pyodide"}}`, "seccomp.native"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".json")
			writeFile(t, file, c.profile)
			inv := pmjailCmd(t, "", "run", "--profile", file, hello)
			if inv.ExitCode != 125 || !strings.HasPrefix(inv.Stderr, "pmjail:") || !strings.Contains(inv.Stderr, c.want) || strings.Contains(inv.Stdout, "must not run") {
				t.Fatalf("exit %d stdout %q stderr %q, want 125 and an error naming %q", inv.ExitCode, inv.Stdout, inv.Stderr, c.want)
			}
		})
	}
	if _, err := os.Stat(policy); err != nil {
		t.Fatal(err)
	}
}

// The strict profile's timing mitigation: coarse clocks, no
// SharedArrayBuffer on the main thread, and the posture says it is on, as
// far as it reaches (TestTrust_StrictTimingHoldsOrSaysDegraded).
func TestTimingMitigation(t *testing.T) {
	src := `const t = performance.now();
console.log(JSON.stringify({ integer: Number.isInteger(t), sab: typeof SharedArrayBuffer, atomics: typeof Atomics }));`
	res := runScript(t, "timing.js", src, "--profile", "strict")
	if res.Status != "ok" || strings.TrimSpace(res.Stdout) != `{"integer":true,"sab":"undefined","atomics":"object"}` {
		t.Fatalf("strict: status %s stdout %q error %+v", res.Status, res.Stdout, res.Error)
	}
	if p := decodePosture(t, res.Posture); p.state("timing_mitigation") != "degraded" {
		t.Fatalf("strict: timing_mitigation %q in the posture", p.state("timing_mitigation"))
	}
	res = runScript(t, "timing.js", src)
	if res.Status != "ok" || !strings.Contains(res.Stdout, `"sab":"function"`) {
		t.Fatalf("default: status %s stdout %q", res.Status, res.Stdout)
	}
	if p := decodePosture(t, res.Posture); p.state("timing_mitigation") != "off" {
		t.Fatalf("default: timing_mitigation %q in the posture", p.state("timing_mitigation"))
	}
}

// The contract's 126/127: a program that cannot be found or executed.
func TestExecProgramNotFoundOrNotExecutable(t *testing.T) {
	inv := pmjailCmd(t, "", "exec", "--", "/nonexistent-pmjail-program")
	if inv.ExitCode != 127 || !strings.Contains(inv.Stderr, "no such file") || !strings.HasPrefix(inv.Stderr, "pmjail: refused:") {
		t.Fatalf("missing program: exit %d stderr %q, want 127 and refused", inv.ExitCode, inv.Stderr)
	}
	dir := t.TempDir()
	text := filepath.Join(dir, "not-a-program")
	writeFile(t, text, "plain text")
	inv = pmjailCmd(t, "", "exec", "--", text)
	if inv.ExitCode != 126 || !strings.HasPrefix(inv.Stderr, "pmjail: refused:") {
		t.Fatalf("a text file as the program: exit %d stderr %q, want 126 and refused", inv.ExitCode, inv.Stderr)
	}
	// A script is refused with how to run it; its status says the job,
	// not pmjail, is at fault.
	script := filepath.Join(dir, "script.sh")
	writeFile(t, script, "#!/bin/sh\necho ran\n")
	if err := os.Chmod(script, 0o755); err != nil {
		t.Fatal(err)
	}
	inv = pmjailCmd(t, "", "exec", "--json", "--", script)
	var res struct {
		Status   string `json:"status"`
		ExitCode int    `json:"exit_code"`
		Stdout   string `json:"stdout"`
		Error    struct{ Message string }
	}
	if err := json.Unmarshal([]byte(inv.Stdout), &res); err != nil {
		t.Fatalf("script: %v in %q", err, inv.Stdout)
	}
	if inv.ExitCode != 126 || res.Status != "refused" || res.ExitCode != 126 || !strings.Contains(res.Error.Message, "--ro-bind") || res.Stdout != "" {
		t.Fatalf("script: exit %d result %+v, want 126, refused and how to run it", inv.ExitCode, res)
	}
}

// An exec's --ro-bind source the jail's unprivileged ids cannot open is the
// job's bad input: refused, naming the path and why, without the host
// probe and second attempt that a missing layer gets.
func TestExecBindSourceRefused(t *testing.T) {
	private := filepath.Join(t.TempDir(), "private") // its directory is 0700
	writeFile(t, private, "root's own")
	// Reachable, but a directory others cannot list, or a file they cannot
	// read: bound, it would be of no use to the program.
	reachable := outsideTmpDir(t, "itest-bindsrc-")
	closed := filepath.Join(reachable, "closed")
	if err := os.Mkdir(closed, 0o700); err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(reachable, "secret")
	if err := os.WriteFile(secret, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ source, want string }{
		{"/nonexistent-pmjail-bind-source", "no such file"},
		{private, "readable by others"},
		{closed, "readable by others"},
		{secret, "readable by others"},
	} {
		start := time.Now()
		inv := pmjailCmd(t, "", "exec", "--ro-bind", c.source, "--", "/usr/bin/true")
		took := time.Since(start)
		if inv.ExitCode != 125 || !strings.HasPrefix(inv.Stderr, "pmjail: refused:") || !strings.Contains(inv.Stderr, c.source) || !strings.Contains(inv.Stderr, c.want) {
			t.Errorf("--ro-bind %s: exit %d stderr %q, want 125, refused, naming the path and %q", c.source, inv.ExitCode, inv.Stderr, c.want)
		}
		t.Logf("--ro-bind %s: %v", c.source, took)
	}
}
