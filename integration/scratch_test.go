package integration

import (
	"encoding/json"
	"strings"
	"testing"
)

// TestGuestScratchFileOps: the scratch directory (TMPDIR) is where a
// JavaScript guest's ordinary file code runs: appending to a file, a
// write with a mode, copying, chmod, utimes, removing a tree. Each was
// refused with EPERM by the Deno seccomp policy, which was traced on
// workloads that wrote no file (chmod, fchmod, copy_file_range, rmdir,
// unlinkat, utimensat), and a failed copy left its empty target behind.
// The file outside the scratch directory stays out of reach (Deno's
// write permission), and nothing is denied by the filter.
func TestGuestScratchFileOps(t *testing.T) {
	src := `{ let h = null; try { h = Deno.hostname(); } catch (e) { if (e?.name !== "NotCapable") throw e; }
  if (h !== null && h !== "pmjail") { console.error("not jailed"); Deno.exit(93); } }
const fs = await import("node:fs");
const S = Deno.env.get("TMPDIR");
const failed = {};
const step = (name, f) => { try { f(); } catch (e) { failed[name] = e.name + ": " + e.message; } };
step("write_mode", () => fs.writeFileSync(S + "/a", "x", { mode: 0o600 }));
step("deno_write_mode", () => Deno.writeTextFileSync(S + "/b", "x", { mode: 0o600 }));
step("append", () => fs.appendFileSync(S + "/a", "y"));
step("copy", () => fs.copyFileSync(S + "/a", S + "/c"));
step("deno_copy", () => Deno.copyFileSync(S + "/a", S + "/d"));
step("chmod", () => fs.chmodSync(S + "/c", 0o640));
step("utimes", () => fs.utimesSync(S + "/c", 1, 1));
step("rm_tree", () => { fs.mkdirSync(S + "/t/u", { recursive: true }); fs.writeFileSync(S + "/t/u/f", "1"); fs.rmSync(S + "/t", { recursive: true }); });
step("rmdir", () => fs.rmdirSync(fs.mkdtempSync(S + "/e-")));
let outside = "allowed";
try { Deno.chmodSync("/job/main.js", 0o777); } catch (e) { outside = e.name; }
const c = Deno.statSync(S + "/c");
console.log(JSON.stringify({ failed, outside, copied: fs.readFileSync(S + "/c", "utf8"), mode: (c.mode & 0o777).toString(8), mtime: c.mtime?.getTime(), left: fs.readdirSync(S).sort() }));`
	r := runScript(t, "scratch.js", src)
	if r.Status != "ok" {
		t.Fatalf("status %s error %+v stderr %s", r.Status, r.Error, r.Stderr)
	}
	var got struct {
		Failed  map[string]string `json:"failed"`
		Outside string            `json:"outside"`
		Copied  string            `json:"copied"`
		Mode    string            `json:"mode"`
		Mtime   int64             `json:"mtime"`
		Left    []string          `json:"left"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(r.Stdout)), &got); err != nil {
		t.Fatalf("report %q: %v", r.Stdout, err)
	}
	for name, err := range got.Failed {
		t.Errorf("%s in the scratch directory failed: %s", name, err)
	}
	if len(r.Denied) > 0 {
		t.Errorf("denied_syscalls %v, want none", r.Denied)
	}
	if got.Outside != "NotCapable" {
		t.Errorf("chmod of the job's file: %s, want NotCapable", got.Outside)
	}
	if got.Copied != "xy" || got.Mode != "640" || got.Mtime != 1000 || strings.Join(got.Left, " ") != "a b c d" {
		t.Errorf("scratch directory after the steps: %+v, want c = \"xy\" mode 640 mtime 1000, files a b c d", got)
	}
}
