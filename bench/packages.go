package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"

	"github.com/pmjail/pmjail/internal/pkgtest"
	"github.com/pmjail/pmjail/packages"
)

// packagesImport: a hello whose code comes from an npm package in the
// store against the same code inline. The difference is what a package
// costs a run: the view's bind, Deno resolving from its npm cache, and
// no warm guest cache (DENO_DIR is the read-only view).
func (b *Bench) packagesImport(ctx context.Context) error {
	b.Report.Section("Packages: an npm import from the store vs the same code inline")
	// Outside the scratch directory, which is the bench's own (0700): the
	// jail opens the view as an unprivileged id.
	store, err := os.MkdirTemp("/var/tmp", "bench-packages-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(store)
	if err := os.Chmod(store, 0o755); err != nil {
		return err
	}
	const code = "export function greet() { return 'hello'; }\n"
	tgz := b.work("benchpkg-1.0.0.tgz")
	if err := os.WriteFile(tgz, pkgtest.Tarball(map[string]any{"name": "benchpkg", "version": "1.0.0", "type": "module", "exports": "./index.js"}, map[string]string{"index.js": code}), 0o644); err != nil {
		return err
	}
	env := []string{packages.EnvDir + "=" + filepath.Join(store, "store")}
	add := exec.CommandContext(ctx, b.Pmjail, "packages", "add", tgz)
	add.Env = append(os.Environ(), env...)
	if out, err := add.CombinedOutput(); err != nil {
		return fmt.Errorf("pmjail packages add: %w: %s", err, out)
	}
	if err := os.WriteFile(b.work("pkg-inline.js"), []byte(code+"console.log(greet());\n"), 0o644); err != nil {
		return err
	}
	if err := os.WriteFile(b.work("pkg-import.js"), []byte("import { greet } from \"npm:benchpkg@1.0.0\";\nconsole.log(greet());\n"), 0o644); err != nil {
		return err
	}
	variants := []Variant{
		{Name: "pmjail run, inline", Argv: []string{b.Pmjail, "run", "--packages=", "pkg-inline.js"}, Want: "hello"},
		{Name: "pmjail run, npm:benchpkg@1.0.0 from the store", Argv: []string{b.Pmjail, "run", "--packages", "npm:benchpkg@1.0.0", "pkg-import.js"}, Env: env, Want: "hello"},
	}
	if _, err := b.compare(ctx, variants, b.Reps, 2, 0); err != nil {
		return err
	}
	b.Report.Para("The package is one ES module, built by the bench; the first import builds the store's view of it, which the warm-up takes.")
	return nil
}
