package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// Flags may follow the FILE (`run hello.js --json`), for run and submit;
// exec's program keeps its own flags, after "--" or without it.
func TestCLI_FlagsAfterTheFile(t *testing.T) {
	dir := outsideTmpDir(t, "itest-cliflags-")
	hello := filepath.Join(dir, "hello.js")
	writeFile(t, hello, `console.log("hi")`)
	inv := pmjailCmd(t, "", "run", hello, "--json", "--timeout", "20s")
	if inv.ExitCode != 0 || inv.Result == nil || inv.Result.Status != "ok" || inv.Result.Stdout != "hi\n" {
		t.Errorf("run FILE --json: exit %d stdout %q stderr %q, want the result object", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	// After "--", an argument is a FILE, however it is spelt.
	inv = pmjailCmd(t, "", "run", hello, "--", "--json")
	if inv.ExitCode != 125 || !strings.Contains(inv.Stderr, "want exactly one FILE") {
		t.Errorf("run FILE -- --json: exit %d stderr %q, want 125 and one FILE", inv.ExitCode, inv.Stderr)
	}
	for _, args := range [][]string{
		{"exec", "--pids", "8", "--", "/bin/echo", "--json", "-n"},
		{"exec", "--pids", "8", "/bin/echo", "--json", "-n"},
	} {
		inv = pmjailCmd(t, "", args...)
		if inv.ExitCode != 0 || inv.Stdout != "--json -n\n" {
			t.Errorf("%q: exit %d stdout %q stderr %q, want echo's own arguments", args, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
	}

	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 4, "0660"))
	inv = pmjailCmd(t, "", "submit", hello, "--socket", d.sock, "--json")
	if inv.ExitCode != 0 || inv.Result == nil || inv.Result.Status != "ok" || inv.Result.Stdout != "hi\n" {
		t.Errorf("submit FILE --socket S --json: exit %d stdout %q stderr %q, want the result object", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
}

// A duration without a unit is refused with the flag named: `--timeout 5`
// was 5 ms.
func TestCLI_DurationNeedsAUnit(t *testing.T) {
	dir := outsideTmpDir(t, "itest-clidur-")
	hello := filepath.Join(dir, "hello.js")
	writeFile(t, hello, `console.log("should not run")`)
	for _, args := range [][]string{
		{"run", "--timeout", "5", hello},
		{"run", hello, "--cpu-time=2.5"},
		{"exec", "--timeout", "30", "--", "/bin/true"},
	} {
		inv := pmjailCmd(t, "", args...)
		flag := "--timeout"
		if strings.Contains(strings.Join(args, " "), "--cpu-time") {
			flag = "--cpu-time"
		}
		if inv.ExitCode != 125 || !strings.HasPrefix(inv.Stderr, "pmjail: ") || !strings.Contains(inv.Stderr, flag) ||
			!strings.Contains(inv.Stderr, "needs a unit") || strings.Contains(inv.Stdout, "should not run") {
			t.Errorf("%q: exit %d stdout %q stderr %q, want 125 and %s named as needing a unit", args, inv.ExitCode, inv.Stdout, inv.Stderr, flag)
		}
	}
	if inv := pmjailCmd(t, "", "run", "--timeout", "5s", "--cpu-time", "1500ms", hello); inv.ExitCode != 0 {
		t.Errorf("durations with units: exit %d stderr %q", inv.ExitCode, inv.Stderr)
	}
}

// Without --json, a handler's value is printed after its output, one line
// of JSON on stdout; a plain script, or a handler that returns nothing,
// prints only its output. submit prints it the same way.
func TestCLI_HandlerValueWithoutJSON(t *testing.T) {
	dir := outsideTmpDir(t, "itest-clivalue-")
	files := map[string]string{
		"handler.js": `export default async (input) => { console.log("side"); return {n: input.n + 1, s: "a\nb"}; };`,
		"nothing.js": `export default async () => { console.log("side"); };`,
		"script.js":  `console.log("side")`,
		"partial.js": `export default async () => { await Deno.stdout.write(new TextEncoder().encode("no newline")); return [1]; };`,
		"handler.py": "def main(input, ctx):\n    print('side')\n    return {'n': input['n'] + 1, 's': 'a\\nb'}\n",
	}
	for name, src := range files {
		writeFile(t, filepath.Join(dir, name), src)
	}
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 4, "0660"))
	for _, c := range []struct{ file, want string }{
		{"handler.js", "side\n" + `{"n":2,"s":"a\nb"}` + "\n"},
		{"nothing.js", "side\n"},
		{"script.js", "side\n"},
		{"partial.js", "no newline\n[1]\n"}, // the value on a line of its own
		{"handler.py", "side\n" + `{"n":2,"s":"a\nb"}` + "\n"},
	} {
		path := filepath.Join(dir, c.file)
		for _, args := range [][]string{
			{"run", "--input", `{"n":1}`, path},
			{"submit", "--socket", d.sock, "--input", `{"n":1}`, path},
		} {
			inv := pmjailCmd(t, "", args...)
			if inv.ExitCode != 0 || inv.Stdout != c.want {
				t.Errorf("%s %s: exit %d stdout %q stderr %q, want stdout %q", args[0], c.file, inv.ExitCode, inv.Stdout, inv.Stderr, c.want)
			}
		}
	}
}

// pmjail version, --version and -v print one version, the one the daemon
// reports in /v1/health.
func TestCLI_Version(t *testing.T) {
	var version string
	for _, args := range [][]string{{"version"}, {"--version"}, {"-v"}} {
		inv := pmjailCmd(t, "", args...)
		first, _, _ := strings.Cut(inv.Stdout, "\n")
		v, ok := strings.CutPrefix(first, "pmjail ")
		if inv.ExitCode != 0 || !ok || v == "" || strings.ContainsAny(v, " \t") {
			t.Fatalf("pmjail %s: exit %d stdout %q stderr %q, want \"pmjail VERSION\" first", args[0], inv.ExitCode, inv.Stdout, inv.Stderr)
		}
		if version != "" && v != version {
			t.Errorf("pmjail %s says %q, pmjail version %q", args[0], v, version)
		}
		version = v
	}
	d := startDaemon(t, daemonDir(t), fmt.Sprintf(baseConfig, 1, 4, "0660"))
	if h, err := d.c.Health(context.Background()); err != nil || h.Version != version {
		t.Errorf("health %+v (%v): want version %q, the CLI's", h, err, version)
	}
}

// A user other than root is told that pmjail needs root, and why, instead
// of an internal error about uid_map; so is a root without the
// capabilities a jail needs. Both are refusals: exit 125.
func TestCLI_PrivilegesNeeded(t *testing.T) {
	dir := outsideTmpDir(t, "itest-clipriv-")
	hello := filepath.Join(dir, "hello.js")
	writeFile(t, hello, `console.log("should not run")`)
	check := func(name string, cmd *exec.Cmd, want ...string) {
		t.Helper()
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		ok := code == 125 && len(lines) == 1 && strings.HasPrefix(lines[0], "pmjail: run: needs root") && out.Len() == 0 &&
			!strings.Contains(lines[0], "internal_error")
		for _, w := range want {
			ok = ok && strings.Contains(lines[0], w)
		}
		if !ok {
			t.Errorf("%s: exit %d stdout %q stderr %q, want 125 and one line naming %q", name, code, out.String(), errb.String(), want)
		}
	}

	nobody := exec.Command(pmjail, "run", hello)
	nobody.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	check("as nobody", nobody, "uid 65534", "CAP_SETUID", "/run/pmjail", "pmjail submit")

	// posture still reports what this user's jail would lack, and says why.
	posture := exec.Command(pmjail, "posture")
	posture.Dir = dir
	posture.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var pout, perr strings.Builder
	posture.Stdout, posture.Stderr = &pout, &perr
	_ = posture.Run()
	if !strings.HasPrefix(perr.String(), "pmjail: posture: needs root (running as uid 65534)") || !strings.HasPrefix(pout.String(), "LAYER") {
		t.Errorf("posture as nobody: stdout %q stderr %q, want the layers and why they lack", pout.String(), perr.String())
	}

	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skip("no setpriv to run root without CAP_SYS_ADMIN")
	}
	check("as root without CAP_SYS_ADMIN", exec.Command(setpriv, "--bounding-set=-sys_admin", pmjail, "run", hello), "CAP_SYS_ADMIN")
	if _, err := os.Stat(hello); err != nil {
		t.Fatal(err)
	}
}

// An empty path is refused naming its flag, not read as the default (a
// daemon on the built-in config, for `--config "$CFG"` with CFG unset)
// nor dialled ("dial unix: missing address"); a flag submit would ignore
// is refused too.
func TestCLI_EmptyPathsAndIgnoredFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"serve", "--check-config", "--config", ""}, 1, "pmjail: --config: empty path (leave the flag out for the default)\n"},
		{[]string{"runs", "get", "--socket", "", "0123456789abcdef"}, 125, "pmjail: runs: --socket: empty path (leave the flag out for /run/pmjail/pmjail.sock)\n"},
		{[]string{"submit", "--socket", "", "--runtime", "deno", "-"}, 125, "pmjail: submit: --socket: empty path (leave the flag out for /run/pmjail/pmjail.sock)\n"},
		{[]string{"submit", "--tenant", "ci", "--runtime", "deno", "-"}, 125, "pmjail: submit: --tenant: only with --nats\n"},
	} {
		inv := pmjailCmd(t, "console.log(1)", c.args...)
		if inv.ExitCode != c.code || inv.Stderr != c.want {
			t.Errorf("pmjail %q: exit %d stderr %q, want %d %q", c.args, inv.ExitCode, inv.Stderr, c.code, c.want)
		}
	}
}
