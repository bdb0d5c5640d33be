package integration

import (
	"slices"
	"testing"
)

// jailedSh guards a shell guest: it goes on only near the top of a fresh
// pid namespace, as the jail's pid 1's child.
const jailedSh = `[ $$ -le 64 ] && [ $PPID = 1 ] || exit 93; `

// TestTrust_GuestCannotForgeLimitStatus: guest → client. A run's status
// says a limit ended it only when one did: a guest that writes V8's
// out-of-memory message on stderr and exits (a Deno guest, or an exec's
// program, which has no V8 heap cap at all), or an exec's program that
// sends itself SIGXCPU after a millisecond of CPU, made its run a
// memory_limit or cpu_limit with the limit's message (and a client that
// grows its limits on such a status, a bigger next run). The attacks only
// print and end themselves. The limits themselves still say so: a V8
// heap that reaches its cap, and RLIMIT_CPU where no cgroup counts CPU.
func TestTrust_GuestCannotForgeLimitStatus(t *testing.T) {
	notLimit := func(t *testing.T, r *Result, code int) {
		t.Helper()
		if r.Status != "error" || r.ExitCode != code || slices.Contains(r.LimitsHit, "memory") || slices.Contains(r.LimitsHit, "cpu") {
			t.Errorf("status %s exit %d signal %q limits_hit %v error %+v stderr %q: want error %d, no limit hit",
				r.Status, r.ExitCode, r.Signal, r.LimitsHit, r.Error, r.Stderr, code)
		}
	}
	t.Run("deno prints V8's out of memory", func(t *testing.T) {
		r := runScript(t, "oom.js", `console.error("\n#\n# Fatal JavaScript out of memory: Reached heap limit\n# JavaScript heap out of memory\n#"); Deno.exit(3);`)
		notLimit(t, r, 3)
	})
	t.Run("exec prints V8's out of memory", func(t *testing.T) {
		inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/sh", "-c", jailedSh+`echo "Fatal process out of memory" >&2; exit 3`)
		if inv.Result == nil {
			t.Fatalf("no result: exit %d stderr %s", inv.ExitCode, inv.Stderr)
		}
		notLimit(t, inv.Result, 3)
	})
	t.Run("exec sends itself SIGXCPU", func(t *testing.T) {
		inv := pmjailCmd(t, "", "exec", "--json", "--", "/bin/sh", "-c", jailedSh+`kill -XCPU $$`)
		if inv.Result == nil {
			t.Fatalf("no result: exit %d stderr %s", inv.ExitCode, inv.Stderr)
		}
		notLimit(t, inv.Result, 128+24)
		if inv.Result.Signal != "SIGXCPU" {
			t.Errorf("signal %q, want SIGXCPU, the guest's own", inv.Result.Signal)
		}
	})
	t.Run("the limits still say so", func(t *testing.T) {
		r := runScript(t, "bomb.js", `const a = []; for (;;) a.push(new Array(1e6).fill({ x: 1 }));`, "--memory", "64M")
		if r.Status != "memory_limit" || !slices.Contains(r.LimitsHit, "memory") {
			t.Errorf("a V8 heap bomb: status %s limits_hit %v error %+v", r.Status, r.LimitsHit, r.Error)
		}
		r, _ = withoutCgroups(t, "exec", "--json", "--cpu-time", "1s", "--", "/bin/sh", "-c", jailedSh+`while :; do :; done`)
		if r.Status != "cpu_limit" || !slices.Contains(r.LimitsHit, "cpu") || r.Signal != "SIGXCPU" {
			t.Errorf("a spin under RLIMIT_CPU without cgroups: status %s signal %q limits_hit %v error %+v", r.Status, r.Signal, r.LimitsHit, r.Error)
		}
	})
}
