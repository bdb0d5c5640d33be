package runtimes

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// pythonHeapFloorMiB is the smallest V8 old space a Python run gets. Python's
// own objects live in Pyodide's wasm memory, which is not V8 heap: a
// --max-old-space-size does not bound it (measured: a 300 MB bytearray runs
// under a 32 MiB cap; the cgroup is the bound). The loader and Pyodide's JS
// half are V8 heap, and under 32 MiB Pyodide's start-up itself dies of
// heap exhaustion (measured at 8 and 16), so the cap never goes below twice
// what a start needs.
const pythonHeapFloorMiB = 64

// pythonHeapBytes is the memory figure whose heap share (see heapMiB) a
// Python run gets for a job memory limit: never under the floor.
func pythonHeapBytes(mem int64) int64 {
	if mem > 0 && heapMiB(mem) < pythonHeapFloorMiB {
		return (pythonHeapFloorMiB*4/3 + 1) << 20
	}
	return mem
}

// pythonV8Flags keep Pyodide's wasm in Liftoff, V8's baseline compiler,
// and TurboFan off Pyodide's JavaScript glue. TurboFan compiles on V8's
// worker threads beside the main thread, and the job's quota is one core:
// what they take is wall time, paid in whole throttled quota periods.
// With tier-up only delayed (the tiering budgets below, int32's range at
// most) a hello run still spent ~80–100 ms of its workers' CPU in TurboFan
// and was throttled in most of its periods, and Python code after the
// start, broker calls included, stalled until a period's end
// (docs/performance.md, "Python's stalls, pinned down"). The price is a
// long CPU-bound script's: nothing measurable under a second, ~10%
// slower at two, ~15% at five. The budgets stay should --liftoff-only
// ever be dropped.
var pythonV8Flags = []string{
	"--wasm-tiering-budget=1300000000",
	"--wasm-wrapper-tiering-budget=1000000",
	"--liftoff-only",
	"--no-opt",
}

// pythonArgs is Deno's command line for the Pyodide loader in one of its
// in-jail modes (run, warm). The warm run must use the same flags as the
// runs: V8 keys its code cache by them.
func pythonArgs(memoryBytes int64, snapshot bool, mode string, rest ...string) []string {
	// Its DENO_DIR starts as a copy of the warm code cache: it reads it.
	return denoArgs(pythonHeapBytes(memoryBytes), pythonV8Flags, pythonReadable(snapshot), true, pyodideLoader, append([]string{mode, pyodideTarget}, rest...)...)
}

// pythonReadable is the loader's read scope: the guest files, the job, the
// Pyodide assets and, when there is one, the snapshot.
func pythonReadable(snapshot bool) []string {
	r := []string{GuestDir, JobDir, pyodideTarget}
	if snapshot {
		r = append(r, snapshotTarget)
	}
	return r
}

// zoneinfoDir is the host's time zone database, which Python's zoneinfo
// finds at its default TZPATH.
const zoneinfoDir = "/usr/share/zoneinfo"

// hasZoneinfo reports whether the host has a time zone database to bind.
func hasZoneinfo() bool {
	fi, err := os.Stat(zoneinfoDir)
	return err == nil && fi.IsDir()
}

// pythonLaunch describes a Python run: Deno running the Pyodide loader, with
// read access only to the guest files, the job, the Pyodide assets and the
// memory snapshot. A run starts from the snapshot when a valid one exists
// (see PyodideSnapshot) and cold otherwise; Launch.Start says which. With a
// warm code cache (see WarmDenoCache) DENO_DIR is a writable copy of it.
func (in *Install) pythonLaunch(guest Guest) (*Launch, error) {
	files, err := pyodideGuestFiles()
	if err != nil {
		return nil, err
	}
	main := pythonMain
	if guest.Files != nil {
		var own []File
		own, main = jobFiles(guest.Files, guest.Entry)
		files = append(files, own...)
	} else {
		files = append(files, File{Path: pythonMain, Data: guest.Source, Mode: 0o444})
	}
	jobArg := "-"
	if guest.Files != nil || len(guest.Env) > 0 {
		manifest := struct {
			Files []string          `json:"files"`
			Env   map[string]string `json:"env"`
		}{Files: []string{}, Env: guest.Env}
		for _, p := range slices.Sorted(maps.Keys(guest.Files)) {
			if p != guest.Entry {
				manifest.Files = append(manifest.Files, JobDir+"/"+p)
			}
		}
		data, err := json.Marshal(manifest)
		if err != nil {
			return nil, err
		}
		files = append(files, File{Path: pythonJob, Data: data, Mode: 0o444})
		jobArg = pythonJob
	}

	binds := in.pyodideBinds()
	snapshotArg, start := "-", "snapshot"
	var copies []Copy
	snap, err := in.PyodideSnapshot()
	if err == nil {
		binds = append(binds, Bind{Source: snap.Path, Target: snapshotTarget})
		snapshotArg = snapshotTarget
		if cache, err := in.warmDenoCache(snap); err == nil {
			copies = append(copies, Copy{Source: cache.Dir, Target: denoDir})
		}
	} else {
		start = "cold: " + err.Error()
	}
	rest := []string{snapshotArg, main, jobArg}
	wheels := hasWheels(guest.Packages)
	if wheels {
		// The loader copies the wheels' tree into Pyodide's file system.
		binds = append(binds, Bind{Source: guest.Packages, Target: PackagesDir})
		rest = append(rest, PackagesDir+"/"+viewPython)
	}
	args := pythonArgs(guest.MemoryBytes, snap != nil, "run", rest...)
	if wheels {
		widenRead(args, PackagesDir)
	}
	if hasZoneinfo() {
		// The loader mounts it for zoneinfo (public data, read-only).
		binds = append(binds, Bind{Source: zoneinfoDir, Target: zoneinfoDir})
		widenRead(args, zoneinfoDir)
	}
	return withStdin(&Launch{
		Program: in.DenoPath,
		Target:  DenoTarget,
		Args:    args,
		Env:     denoEnv(),
		Dir:     JobDir,
		Binds:   binds,
		Copies:  copies,
		Files:   files,
		Channel: true,
		Start:   start,
	}, guest.Stdin), nil
}

// viewPython is the wheels' tree in a package view (package packages'
// layout: packages.ViewPython, with its file list beside it).
const viewPython = "python"

// hasWheels reports whether the package view at dir holds wheels.
func hasWheels(dir string) bool {
	if dir == "" {
		return false
	}
	st, err := os.Stat(filepath.Join(dir, viewPython))
	return err == nil && st.IsDir()
}
