package integration

import (
	"context"
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
			for _, warm := range []bool{true, false} {
				job := &api.Job{Runtime: "deno", Source: tc.source}
				var res *api.Result
				if warm {
					res = warmRun(t, d, job)
				} else {
					job.Env = map[string]string{"COLD": "1"}
					var err error
					if res, err = d.c.Run(context.Background(), job); err != nil {
						t.Fatal(err)
					}
					if res.Warm {
						t.Fatalf("a job with env was served warm")
					}
				}
				want := jail.StatusOK
				if tc.code != 0 {
					want = jail.StatusError
				}
				if res.Status != want || res.ExitCode != tc.code || res.Signal != "" || res.Stdout != tc.stdout {
					t.Errorf("warm %v: status %s, exit %d, signal %q, stdout %q (stderr %q); want %s, exit %d, stdout %q",
						warm, res.Status, res.ExitCode, res.Signal, res.Stdout, res.Stderr, want, tc.code, tc.stdout)
				}
			}
		})
	}
}
