package runtimes

import (
	"embed"
	"fmt"
	"path"
	"path/filepath"
)

// The Pyodide loader and the Python bootstrap, written into every Python
// run's root beside the Deno guest files (the loader imports channel.js).
//
//go:embed pyodide/loader.mjs pyodide/bootstrap.py
var pyodideFS embed.FS

// Paths of the Pyodide runtime inside a job's root.
const (
	pyodideTarget  = RuntimeDir + "/pyodide"
	snapshotTarget = RuntimeDir + "/pyodide.snapshot"
	pyodideLoader  = GuestDir + "/loader.mjs"
	pythonMain     = JobDir + "/main.py"
	// pythonJob lists, as JSON, the job's other files (the loader copies
	// what it names, and lists no directory) and its env, which
	// the loader gives Python's os.environ (it reads no variable itself).
	pythonJob = GuestDir + "/job.json"
)

// pyodideAssets are the files of the pyodide package a run reads: the
// loader, the wasm module, the standard library and the lock file Pyodide
// checks at start-up. Binding them one by one keeps the package.json, the
// source maps and the demo pages out of the root.
var pyodideAssets = []string{
	"pyodide.mjs",
	"pyodide.asm.mjs",
	"pyodide.asm.wasm",
	"python_stdlib.zip",
	"pyodide-lock.json",
}

// pyodideGuestFiles are the guest files of a Python run: the Deno channel
// code, the Pyodide loader and the Python bootstrap, all under GuestDir.
func pyodideGuestFiles() ([]File, error) {
	files, err := guestFiles()
	if err != nil {
		return nil, err
	}
	for _, name := range []string{"loader.mjs", "bootstrap.py"} {
		data, err := pyodideFS.ReadFile("pyodide/" + name)
		if err != nil {
			return nil, fmt.Errorf("read embedded pyodide file %s: %w", name, err)
		}
		files = append(files, File{Path: path.Join(GuestDir, name), Data: data, Mode: 0o444})
	}
	return files, nil
}

// pyodideBinds binds the Pyodide assets read-only at pyodideTarget.
func (in *Install) pyodideBinds() []Bind {
	binds := make([]Bind, 0, len(pyodideAssets))
	for _, name := range pyodideAssets {
		binds = append(binds, Bind{
			Source: filepath.Join(in.PyodideDir, name),
			Target: path.Join(pyodideTarget, name),
		})
	}
	return binds
}
