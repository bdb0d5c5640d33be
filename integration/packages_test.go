package integration

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/pkgtest"
	"github.com/pmjail/pmjail/packages"
)

// packageStore gives the test its own package store (outside /tmp, which
// every jail covers with its own), through the setting every pmjail the
// test starts inherits, and adds the files to it with `pmjail packages
// add`, as an operator would.
func packageStore(t *testing.T, files map[string][]byte) string {
	t.Helper()
	dir := outsideTmpDir(t, "pmjail-packages-")
	t.Setenv(packages.EnvDir, filepath.Join(dir, "store"))
	src := t.TempDir()
	for name, data := range files {
		p := filepath.Join(src, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		inv := pmjailCmd(t, "", "packages", "add", p)
		if inv.ExitCode != 0 || !strings.HasPrefix(inv.Stdout, "added ") {
			t.Fatalf("packages add %s: exit %d\n%s%s", name, inv.ExitCode, inv.Stdout, inv.Stderr)
		}
	}
	return filepath.Join(dir, "store")
}

// leftPackage is an npm package as authors ship them: conditional exports
// with an ES module for import and a CommonJS one (which requires a file
// of its own) for require, and a subpath export.
func leftPackage() []byte {
	return pkgtest.Tarball(map[string]any{
		"name": "left", "version": "1.0.0", "main": "./index.cjs",
		"exports": map[string]any{
			".":     map[string]string{"import": "./index.mjs", "require": "./index.cjs"},
			"./cjs": "./index.cjs",
		},
	}, map[string]string{
		"index.mjs": "export const kind = 'esm';\nexport function pad(s, n) { return String(s).padStart(n, '*'); }\n",
		"index.cjs": "const util = require('./util.cjs');\nexports.kind = 'cjs';\nexports.pad = util.pad;\n",
		"util.cjs":  "exports.pad = (s, n) => String(s).padStart(n, '-');\n",
	})
}

// appPackage depends on a scoped package by range: the store holds the
// dependency, the view the closure.
func appPackage() (app, dep []byte) {
	dep = pkgtest.Tarball(map[string]any{"name": "@acme/dep", "version": "2.1.0", "main": "index.js"},
		map[string]string{"index.js": "module.exports = { dep: 'dep 2.1.0' };\n"})
	app = pkgtest.Tarball(map[string]any{"name": "app", "version": "1.0.0", "type": "module", "exports": "./index.js", "dependencies": map[string]string{"@acme/dep": "^2.0.0"}},
		map[string]string{"index.js": "import d from '@acme/dep';\nexport const app = 'app uses ' + d.dep;\n"})
	return app, dep
}

func rightPackage() []byte {
	return pkgtest.Tarball(map[string]any{"name": "right", "version": "1.0.0", "main": "index.js"},
		map[string]string{"index.js": "module.exports = 'right';\n"})
}

// A job imports an npm package from the store, ES module and CommonJS, in
// a jail with an empty network namespace; a package the job may not use
// cannot be imported even by a specifier the code computes; the store is
// read-only to the guest.
func TestPackages_NPMFromStoreOffline(t *testing.T) {
	store := packageStore(t, map[string][]byte{"left-1.0.0.tgz": leftPackage(), "right-1.0.0.tgz": rightPackage()})
	app, dep := appPackage()
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "app-1.0.0.tgz"), string(app))
	inv := pmjailCmd(t, "", "packages", "add", filepath.Join(dir, "app-1.0.0.tgz"))
	if want := "pmjail: packages add: package refused: npm:app@1.0.0 depends on @acme/dep@^2.0.0, not in the store: add each dependency first (exact versions)\n"; inv.ExitCode != 125 || inv.Stderr != want {
		t.Fatalf("add with a dependency missing: exit %d %q, want %q", inv.ExitCode, inv.Stderr, want)
	}
	writeFile(t, filepath.Join(dir, "dep-2.1.0.tgz"), string(dep))
	if inv := pmjailCmd(t, "", "packages", "add", filepath.Join(dir, "dep-2.1.0.tgz"), filepath.Join(dir, "app-1.0.0.tgz")); inv.ExitCode != 0 {
		t.Fatalf("packages add: exit %d %s", inv.ExitCode, inv.Stderr)
	}
	r := runScript(t, "app.js", `import { app } from "npm:app@1.0.0"; export default () => app;`, "--packages", "npm:app@1.0.0")
	if r.Status != "ok" || string(r.Value) != `"app uses dep 2.1.0"` {
		t.Fatalf("a package with a dependency: %s %s %+v", r.Status, r.Value, r.Error)
	}

	inv = pmjailCmd(t, "", "packages", "list")
	if inv.ExitCode != 0 || !strings.Contains(inv.Stdout, "npm:left@1.0.0\tsha512-") || !strings.Contains(inv.Stdout, "npm:right@1.0.0\tsha512-") {
		t.Fatalf("packages list: exit %d\n%s%s", inv.ExitCode, inv.Stdout, inv.Stderr)
	}
	stored := filepath.Join(store, "npm", "left", "1.0.0", "index.mjs")
	before, err := os.ReadFile(stored)
	if err != nil {
		t.Fatal(err)
	}

	const src = `
import { kind, pad } from "npm:left@1.0.0";
import cjs from "npm:left@1.0.0/cjs";
const file = "/packages/npm/registry.npmjs.org/left/1.0.0/index.mjs";
export default async () => {
  // A specifier the host-side scan cannot see: the root must refuse it.
  let computed;
  try { await import("npm:" + ["right", "1.0.0"].join("@")); computed = "imported"; } catch (e) { computed = e.message; }
  let write;
  try { Deno.writeTextFileSync(file, "hijacked"); write = "wrote"; } catch (e) { write = e.name; }
  const st = Deno.statSync(file);
  return { kind, padded: pad(7, 3), cjs: cjs.kind, cjsPadded: cjs.pad(7, 3), computed, write, uid: st.uid, mode: st.mode & 0o777 };
};`
	r = runScript(t, "main.js", src, "--packages", "npm:left@1.0.0")
	if r.Status != "ok" {
		t.Fatalf("status %s: %+v\nstderr: %s", r.Status, r.Error, r.Stderr)
	}
	var v struct {
		Kind, Padded, CJS, CJSPadded, Computed, Write string
		UID, Mode                                     int
	}
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatalf("value %s: %v", r.Value, err)
	}
	if v.Kind != "esm" || v.Padded != "**7" || v.CJS != "cjs" || v.CJSPadded != "--7" {
		t.Errorf("imports: %s", r.Value)
	}
	if !strings.Contains(v.Computed, `npm package not found in cache: "right", --cached-only is specified`) {
		t.Errorf("a computed import of a package not allowed: %q", v.Computed)
	}
	// Deno's permissions refuse first; below them the files are the
	// host's root's (unmapped in the job: the overflow id) and read-only,
	// on a read-only mount.
	if v.Write != "NotCapable" && v.Write != "PermissionDenied" {
		t.Errorf("writing into the store: %q", v.Write)
	}
	if v.UID != 65534 || v.Mode&0o222 != 0 {
		t.Errorf("the store as the guest sees it: uid %d, mode %o", v.UID, v.Mode)
	}
	if after, err := os.ReadFile(stored); err != nil || string(after) != string(before) {
		t.Errorf("the stored file changed: %q %v", after, err)
	}
	var posture struct {
		Layers []struct{ Name, State, Detail string } `json:"layers"`
	}
	if err := json.Unmarshal(r.Posture, &posture); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(posture.Layers, func(l struct{ Name, State, Detail string }) bool { return l.Name == "network_namespace" })
	if i < 0 || posture.Layers[i].State != "applied" || !strings.Contains(posture.Layers[i].Detail, "holds only lo") {
		t.Errorf("posture layers %+v: want an empty network namespace", posture.Layers)
	}
}

// An import the operator does not allow is refused before the run, by
// name, with what is allowed instead.
func TestPackages_UnlistedRefusedBeforeRun(t *testing.T) {
	packageStore(t, map[string][]byte{"left-1.0.0.tgz": leftPackage(), "right-1.0.0.tgz": rightPackage()})
	for src, want := range map[string]string{
		`import r from "npm:right@1.0.0"; console.log(r);`:  "pmjail: run: source: package not allowed: npm:right@1.0.0 is not among the packages jobs may use here\n",
		`import { kind } from "npm:left@2.0.0"; kind;`:      "pmjail: run: source: package not allowed: npm:left@2.0.0: this version is not allowed (allowed: npm:left@1.0.0)\n",
		`import { kind } from "npm:left@^1.0.0"; kind;`:     "pmjail: run: source: invalid package reference \"npm:left@^1.0.0\": version \"^1.0.0\" is not exact; pin one version (X.Y.Z), not a range or a tag\n",
		`import { join } from "jsr:@std/path@1.0.8"; join;`: "pmjail: run: source: package not allowed: jsr:@std/path@1.0.8: jsr: packages are not supported; use the npm: form of a vetted package\n",
	} {
		path := filepath.Join(t.TempDir(), "main.js")
		writeFile(t, path, src)
		inv := pmjailCmd(t, "", "run", "--packages", "npm:left@1.0.0", path)
		if inv.ExitCode != 125 || inv.Stderr != want {
			t.Errorf("%s: exit %d\nstderr %q\nwant   %q", src, inv.ExitCode, inv.Stderr, want)
		}
	}
}

// A Python job imports a locally built pure-Python wheel: its files are
// in Pyodide's file system, read-only, first on sys.path; no micropip, no
// network. Without the package allowed, the import fails.
func TestPackages_PythonWheel(t *testing.T) {
	packageStore(t, map[string][]byte{"Greet_Lib-1.0-py3-none-any.whl": pkgtest.Wheel("Greet_Lib", "1.0", true, map[string]string{
		"greet_lib/__init__.py": "from .core import hi\n",
		"greet_lib/core.py":     "def hi(name):\n    return 'hi ' + name\n",
	})})
	const src = `
import os, greet_lib
def main(input, ctx):
    target = os.path.join(os.path.dirname(greet_lib.__file__), "core.py")
    try:
        open(target, "w").write("x")
        write = "wrote"
    except OSError as e:
        write = type(e).__name__
    return {"hi": greet_lib.hi("py"), "file": greet_lib.__file__, "write": write}
`
	r := runScript(t, "main.py", src)
	if r.Status != "ok" {
		t.Fatalf("status %s: %+v\nstderr: %s", r.Status, r.Error, r.Stderr)
	}
	var v struct{ Hi, File, Write string }
	if err := json.Unmarshal(r.Value, &v); err != nil {
		t.Fatalf("value %s: %v", r.Value, err)
	}
	if v.Hi != "hi py" || v.File != "/packages/python/greet_lib/__init__.py" || v.Write != "PermissionError" {
		t.Errorf("value %s", r.Value)
	}
	r = runScript(t, "main.py", src, "--packages", "")
	if r.Status != "error" || r.Error == nil || !strings.Contains(r.Error.Message, "No module named 'greet_lib'") {
		t.Errorf("without the package allowed: %s %+v", r.Status, r.Error)
	}
}

// The daemon's ceiling names the packages its jobs may use: an allowed
// one imports, an unlisted one is a 400 naming the source, and a
// configuration naming a package the store lacks is refused at start.
func TestPackages_Daemon(t *testing.T) {
	packageStore(t, map[string][]byte{"left-1.0.0.tgz": leftPackage(), "right-1.0.0.tgz": rightPackage()})
	dir := daemonDir(t)
	d := startDaemon(t, dir, `{"version": 1, "ceiling": {"packages": ["npm:left@1.0.0"]}}`)
	ctx := context.Background()
	// The first run teaches the warm pool its template; the next ones may
	// be served warm, and must import alike.
	for i := 0; i < 4; i++ {
		if i > 0 {
			awaitWarm(t, d)
		}
		res, err := d.c.Run(ctx, &api.Job{Runtime: "js", Source: `import { pad } from "npm:left@1.0.0"; export default () => pad(1, 2);`})
		if err != nil || res.Status != "ok" || string(res.Value) != `"*1"` {
			t.Fatalf("allowed package, run %d: %+v %v", i, res, err)
		}
		t.Logf("run %d warm=%v %s", i, res.Warm, res.WarmReason)
	}
	_, err := d.c.Run(ctx, &api.Job{Runtime: "js", Source: `import r from "npm:right@1.0.0"; export default () => r;`})
	var e *client.Error
	if !errors.As(err, &e) || e.StatusCode != 400 || e.Field != "source" || e.Message != "source: package not allowed: npm:right@1.0.0 is not among the packages jobs may use here" {
		t.Fatalf("unlisted package: %#v %v", e, err)
	}

	cfg := filepath.Join(dir, "ghost.json")
	writeFile(t, cfg, `{"version": 1, "ceiling": {"packages": ["npm:ghost@1.0.0"]}}`)
	inv := pmjailCmd(t, "", "serve", "--socket", filepath.Join(dir, "ghost.sock"), "--config", cfg)
	if inv.ExitCode == 0 || !strings.Contains(inv.Stderr, "ceiling.packages[0]: package not in the store: npm:ghost@1.0.0") {
		t.Fatalf("a config naming a package the store lacks: exit %d\n%s", inv.ExitCode, inv.Stderr)
	}
}
