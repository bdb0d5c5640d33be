package runtimes

import (
	"embed"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
)

//go:embed guest/*.js
var guestFS embed.FS

// guestFiles returns the bootstrap files every Deno-based run carries.
func guestFiles() ([]File, error) {
	entries, err := guestFS.ReadDir("guest")
	if err != nil {
		return nil, fmt.Errorf("read embedded guest files: %w", err)
	}
	var files []File
	for _, e := range entries {
		data, err := guestFS.ReadFile("guest/" + e.Name())
		if err != nil {
			return nil, fmt.Errorf("read embedded guest file %s: %w", e.Name(), err)
		}
		files = append(files, File{Path: path.Join(GuestDir, e.Name()), Data: data, Mode: 0o444})
	}
	return files, nil
}

// denoEnv is the whole environment of a Deno guest: nothing is inherited,
// and DENO_DIR lives on the run's own tmpfs so no storage (code cache,
// localStorage, Cache API, KV) survives into another run.
func denoEnv() []string {
	return []string{
		"PATH=/nonexistent",
		"HOME=" + TmpDir,
		"DENO_DIR=" + denoDir,
		"DENO_NO_UPDATE_CHECK=1",
		"DENO_NO_PROMPT=1",
		"NO_COLOR=1",
		"LANG=C.UTF-8",
	}
}

// heapMiB caps V8's old space below the job's memory limit, leaving room
// for the runtime's own native memory; it is the memory bound of last resort
// on a host without a cgroup.
func heapMiB(memoryBytes int64) int64 {
	if memoryBytes <= 0 {
		return 0
	}
	mib := memoryBytes >> 20
	heap := mib * 3 / 4
	if heap < 16 {
		heap = 16
	}
	return heap
}

// denoArgs is Deno's locked-down command line: no prompt, no config or lock
// discovery, no remote or npm imports, the import permission denied (not
// merely unusable for want of --no-remote's opposite and of a network),
// read access only to the given paths, write access only to the channel's
// outgoing FIFO, and no env, net, run, ffi or sys permission at all. v8 are extra V8 flags after the heap cap.
// Without codeCache, V8's code cache is neither read nor written: it is
// written for a later run, and a run whose DENO_DIR starts empty dies with
// it, so creating and filling its database is wasted work (−1 ms a hello,
// measured).
func denoArgs(memoryBytes int64, v8 []string, readable []string, codeCache bool, entry string, rest ...string) []string {
	args := []string{
		DenoTarget, "run",
		"--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm",
		"--cached-only", "--no-check", "--deny-import",
	}
	if !codeCache {
		args = append(args, "--no-code-cache")
	}
	if len(readable) > 0 {
		allow := "--allow-read="
		for i, p := range readable {
			if i > 0 {
				allow += ","
			}
			allow += p
		}
		args = append(args, allow)
	}
	args = append(args, "--allow-write="+ChannelOut)
	if heap := heapMiB(memoryBytes); heap > 0 {
		v8 = append([]string{"--max-old-space-size=" + strconv.FormatInt(heap, 10)}, v8...)
	}
	if len(v8) > 0 {
		args = append(args, "--v8-flags="+strings.Join(v8, ","))
	}
	args = append(args, entry)
	return append(args, rest...)
}

// denoLaunch describes a JavaScript or TypeScript run.
func (in *Install) denoLaunch(guest Guest) (*Launch, error) {
	files, err := guestFiles()
	if err != nil {
		return nil, err
	}
	main := JobDir + "/main.js"
	if guest.TypeScript {
		main = JobDir + "/main.ts"
	}
	if guest.Files != nil {
		var own []File
		own, main = jobFiles(guest.Files, guest.Entry)
		files = append(files, own...)
	} else {
		files = append(files, File{Path: main, Data: guest.Source, Mode: 0o444})
	}
	var copies []Copy
	if cache, err := in.GuestCache(); err == nil {
		copies = append(copies, Copy{Source: cache.Dir, Target: denoDir})
	}
	bootstrap := GuestDir + "/bootstrap.js"
	args := denoArgs(guest.MemoryBytes, nil, []string{GuestDir, JobDir}, false, bootstrap, main)
	if len(guest.Env) > 0 {
		// Deno reads no variable without a grant: the job's names, and
		// only those (not DENO_DIR and the rest of the runtime's own).
		// Flags go before the module; after it they are its arguments.
		args = slices.Insert(args, slices.Index(args, bootstrap), "--allow-env="+strings.Join(slices.Sorted(maps.Keys(guest.Env)), ","))
	}
	return withStdin(&Launch{
		Program: in.DenoPath,
		Target:  DenoTarget,
		Args:    args,
		Env:     Environ(denoEnv(), guest.Env),
		Files:   files,
		Copies:  copies,
		Channel: true,
	}, guest.Stdin), nil
}

// Launch describes the run of job on its runtime.
func (in *Install) Launch(guest Guest) (*Launch, error) {
	switch guest.Runtime {
	case Deno:
		return in.denoLaunch(guest)
	case Python:
		return in.pythonLaunch(guest)
	}
	return nil, fmt.Errorf("%w %q", ErrUnknownRuntime, guest.Runtime)
}
