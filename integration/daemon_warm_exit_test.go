package integration

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// TestDaemonWarmExit: a plain script's runtime says how it exits (the
// exit frame) and the supervisor then kills the jail rather than wait for
// Deno's own teardown. What the result says must not change for it: the
// exit code set by Deno.exit or Deno.exitCode, output written last, work
// still scheduled when the module ends, and the guest's own unload
// listeners (which run after the bootstrap's, so the runtime exits as it
// would without the frame). Each job runs warm and cold (an env makes a
// job cold) and must give the same result.
func TestDaemonWarmExit(t *testing.T) {
	d := startDaemon(t, daemonDir(t), warmConfig)
	cases := []struct {
		name, source, stdout string
		code                 int
	}{
		{"hello", `console.log("hello")`, "hello\n", 0},
		{"Deno.exit", `console.log("a"); Deno.exit(3); console.log("never")`, "a\n", 3},
		{"Deno.exitCode", `console.log("b"); Deno.exitCode = 4`, "b\n", 4},
		{"timer after the module", `setTimeout(() => { console.log("late"); Deno.exitCode = 6 }, 30); console.log("early")`, "early\nlate\n", 6},
		{"unload listener", `addEventListener("unload", () => { console.log("bye"); Deno.exitCode = 5 }); console.log("hi")`, "hi\nbye\n", 5},
		{"onunload", `globalThis.onunload = () => { console.log("bye") }; console.log("hi")`, "hi\nbye\n", 0},
		{"unload listener added late", `setTimeout(() => addEventListener("unload", () => console.log("bye")), 10)`, "bye\n", 0},
		// Node's process runs its exit listeners in an unload listener of
		// its own, added without the global addEventListener, after the
		// bootstrap's.
		{"process exit listener", `process.on("exit", () => { console.log("bye"); process.exitCode = 5 }); console.log("hi")`, "hi\nbye\n", 5},
		{"node:process exit listener", `import p from "node:process"; p.once("exit", (c) => console.log("bye", c)); console.log("hi")`, "hi\nbye 0\n", 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			warmAndCold(t, d, tc.source, func(warm bool, res *api.Result) {
				want := jail.StatusOK
				if tc.code != 0 {
					want = jail.StatusError
				}
				if res.Status != want || res.ExitCode != tc.code || res.Signal != "" || res.Stdout != tc.stdout {
					t.Errorf("warm %v: status %s, exit %d, signal %q, stdout %q (stderr %q); want %s, exit %d, stdout %q",
						warm, res.Status, res.ExitCode, res.Signal, res.Stdout, res.Stderr, want, tc.code, tc.stdout)
				}
			})
		})
	}
}

// warmAndCold runs the Deno source on d warm, then cold (an env makes a
// job cold), and gives check each result: the two must agree.
func warmAndCold(t *testing.T, d *daemon, source string, check func(warm bool, res *api.Result)) {
	t.Helper()
	check(true, warmRun(t, d, &api.Job{Runtime: "deno", Source: source}))
	res, err := d.c.Run(context.Background(), &api.Job{Runtime: "deno", Source: source, Env: map[string]string{"COLD": "1"}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Warm {
		t.Fatalf("a job with env was served warm")
	}
	check(false, res)
}

// forgedExit is guest code that spins Workers on every core it can, then
// writes an exit frame of its own and goes on running: a guest that says
// it exits so as to outlive its answer. Outside a jail it stops at once
// (no channel to forge on).
const forgedExit = `if (!Deno.statSync("/pmjail/channel/out").isFile) {
  const spin = "postMessage(1); while (true) {}";
  const url = URL.createObjectURL(new Blob([spin], { type: "application/javascript" }));
  await Promise.all([0, 1].map(() => new Promise((up) => { new Worker(url, { type: "module" }).onmessage = up })));
  const body = new TextEncoder().encode('{"type":"exit","code":0}');
  const frame = new Uint8Array(4 + body.length);
  new DataView(frame.buffer).setUint32(0, body.length);
  frame.set(body, 4);
  Deno.openSync("/pmjail/channel/out", { write: true }).writeSync(frame);
  await new Promise((later) => setTimeout(later, 5000));
}`

// TestDaemonWarmExitKillsRuntime: by the time a warm run's answer reaches
// its client, the runtime has been killed, all its threads: none runs on
// past the answer with CPU time the answer does not count. (Killing the
// jail's pid 1 alone ends the runtime only once pid 1 has exited, and
// until then its Workers ran on.)
func TestDaemonWarmExitKillsRuntime(t *testing.T) {
	d := startDaemon(t, daemonDir(t), warmConfig)
	for range 3 {
		res := warmRun(t, d, &api.Job{Runtime: "deno", Source: forgedExit, Posture: "full"})
		if res.Status != jail.StatusOK || res.Posture == nil || res.Posture.Observed == nil || res.Posture.Observed.PID <= 0 {
			t.Fatalf("status %s (%s), posture %+v: want ok with the runtime's pid", res.Status, res.Stderr, res.Posture)
		}
		if alive := runningThreads(res.Posture.Observed.PID); len(alive) > 0 {
			t.Fatalf("after the answer, threads %v of the runtime (pid %d) run on, not killed", alive, res.Posture.Observed.PID)
		}
	}
}

// runningThreads lists the threads of pid that are neither exiting
// (PF_EXITING) nor have a SIGKILL pending: none once the process was
// killed, or is gone.
func runningThreads(pid int) []string {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return nil // gone
	}
	const pfExiting = 0x4
	var alive []string
	for _, task := range tasks {
		dir := fmt.Sprintf("/proc/%d/task/%s/", pid, task.Name())
		stat, err1 := os.ReadFile(dir + "stat")
		status, err2 := os.ReadFile(dir + "status")
		if err1 != nil || err2 != nil {
			continue // reaped meanwhile
		}
		// Fields after the command's closing parenthesis: state, then
		// ppid, pgrp, session, tty, tpgid, flags.
		f := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		flags, _ := strconv.ParseUint(f[6], 10, 64)
		if f[0] == "Z" || f[0] == "X" || flags&pfExiting != 0 || killPending(string(status)) {
			continue
		}
		alive = append(alive, task.Name())
	}
	return alive
}

// killPending reports whether a /proc status shows SIGKILL pending, to
// the thread or its process.
func killPending(status string) bool {
	for _, line := range strings.Split(status, "\n") {
		name, value, _ := strings.Cut(line, ":")
		if name != "SigPnd" && name != "ShdPnd" {
			continue
		}
		if mask, err := strconv.ParseUint(strings.TrimSpace(value), 16, 64); err == nil && mask&(1<<(9-1)) != 0 {
			return true
		}
	}
	return false
}

// TestHandlerExitCode: a handler's module run by `deno run` would exit
// with the exit code the module or the handler set, so the run does: a
// non-zero one makes it an error, exit_code that code, error.code exit,
// with the handler's value kept. Warm and cold alike; an error the
// handler throws still exits 1, as it would under `deno run`.
func TestHandlerExitCode(t *testing.T) {
	d := startDaemon(t, daemonDir(t), warmConfig)
	cases := []struct {
		name, source, value string
		code                int
		errCode             string
	}{
		{"none", `export default () => "v"`, `"v"`, 0, ""},
		{"Deno.exitCode", `export default () => { Deno.exitCode = 3; return "v" }`, `"v"`, 3, "exit"},
		{"process.exitCode", `export default async () => { process.exitCode = 4; return { saved: false } }`, `{"saved":false}`, 4, "exit"},
		{"set by the module", `Deno.exitCode = 2; export default () => 1`, `1`, 2, "exit"},
		{"set back to 0", `Deno.exitCode = 2; export default () => { Deno.exitCode = 0; return 1 }`, `1`, 0, ""},
		{"unload listener", `export default () => { addEventListener("unload", () => { Deno.exitCode = 5 }); return 1 }`, `1`, 5, "exit"},
		{"and a throw", `export default () => { Deno.exitCode = 3; throw new Error("no") }`, ``, 1, "Error"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			warmAndCold(t, d, tc.source, func(warm bool, res *api.Result) {
				want := jail.StatusOK
				if tc.code != 0 {
					want = jail.StatusError
				}
				errCode := ""
				if res.Error != nil {
					errCode = res.Error.Code
				}
				if res.Status != want || res.ExitCode != tc.code || errCode != tc.errCode || compact(res.Value) != tc.value {
					t.Errorf("warm %v: status %s, exit %d, error %+v, value %s (stderr %q); want %s, exit %d, error code %q, value %s",
						warm, res.Status, res.ExitCode, res.Error, res.Value, res.Stderr, want, tc.code, tc.errCode, tc.value)
				}
				if tc.errCode == "exit" && errCode == "exit" && res.Error.Message != fmt.Sprintf("exited with code %d", tc.code) {
					t.Errorf("warm %v: error message %q", warm, res.Error.Message)
				}
			})
		})
	}
}
