package runtimes

// pythonHeapFloorMiB is the smallest V8 old space a Python run gets. Python's
// own objects live in Pyodide's wasm memory, which is not V8 heap: a
// --max-old-space-size does not bound it (measured: a 300 MB bytearray runs
// under a 32 MiB cap; the cgroup is the bound). The loader and Pyodide's JS
// half are V8 heap, and under 32 MiB Pyodide's start-up itself dies of
// heap exhaustion (measured at 8 and 16), so the cap never goes below twice
// what a start needs.
const pythonHeapFloorMiB = 64

// pythonLaunch describes a Python run: Deno running the Pyodide loader, with
// read access only to the guest files, the job, the Pyodide assets and the
// memory snapshot. A run starts from the snapshot when a valid one exists
// (see PyodideSnapshot) and cold otherwise; PythonStart says which.
func (in *Install) pythonLaunch(job Job) (*Launch, error) {
	files, err := pyodideGuestFiles()
	if err != nil {
		return nil, err
	}
	files = append(files, File{Path: pythonMain, Data: job.Source, Mode: 0o444})

	binds := in.pyodideBinds()
	readable := []string{GuestDir, JobDir, pyodideTarget}
	snapshotArg := "-"
	if snap, err := in.PyodideSnapshot(); err == nil {
		binds = append(binds, Bind{Source: snap.Path, Target: snapshotTarget})
		readable = append(readable, snapshotTarget)
		snapshotArg = snapshotTarget
	}

	mem := job.MemoryBytes
	if mem > 0 && heapMiB(mem) < pythonHeapFloorMiB {
		// The memory figure whose heap share (see heapMiB) is the floor.
		mem = (pythonHeapFloorMiB*4/3 + 1) << 20
	}
	return &Launch{
		Program: in.DenoPath,
		Target:  denoTarget,
		Args:    denoArgs(mem, readable, pyodideLoader, "run", pyodideTarget, snapshotArg, pythonMain),
		Env:     denoEnv(),
		Binds:   binds,
		Files:   files,
		Channel: true,
	}, nil
}
