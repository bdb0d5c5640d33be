package runtimes

import (
	"embed"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pmjail/pmjail/api"
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
	main := JobDir + "/main" + guest.Dialect.Ext()
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
	entry := GuestDir + "/bootstrap.js"
	if guest.TypeCheck {
		files = append(files, File{Path: checkEntry, Data: checkSource(main), Mode: 0o444})
		entry = checkEntry
	}
	args := denoArgs(guest.MemoryBytes, nil, []string{GuestDir, JobDir, ScratchDir}, false, entry, main)
	// The guest may write its scratch directory, on its own /tmp, and
	// nothing else but the channel.
	args[slices.Index(args, "--allow-write="+ChannelOut)] += "," + ScratchDir
	if guest.TypeCheck {
		// --quiet: no "Check <entry>" line, which names pmjail's file, in
		// the guest's stderr; type errors are still reported.
		args[slices.Index(args, "--no-check")] = "--check"
		args = slices.Insert(args, 2, "--quiet")
	}
	// Deno reads no variable without a grant: the job's names, and only
	// those (not DENO_DIR and the rest of the runtime's own), and
	// NODE_ENV, which npm packages read as they load: a package that reads
	// it without the grant cannot be imported at all, and it holds nothing
	// but what the job set (api.EnvProgramOnly), unset otherwise; and
	// TMPDIR, the scratch directory's path (node:os's tmpdir reads it,
	// which a job may not set). Flags go
	// before the module; after it they are its arguments.
	readable := slices.Sorted(maps.Keys(guest.Env))
	for _, name := range append([]string{"TMPDIR"}, api.EnvProgramOnly...) {
		if !slices.Contains(readable, name) {
			readable = append(readable, name)
		}
	}
	args = slices.Insert(args, slices.Index(args, entry), "--allow-env="+strings.Join(readable, ","))
	// The guest's own uid and gid, as its user namespace maps them (the
	// same for every job): node:fs's access and process.getuid ask for
	// them, and without the grant every access check threw NotCapable.
	// No other system information (hostname, load, memory, interfaces).
	args = slices.Insert(args, slices.Index(args, entry), "--allow-sys=uid,gid")
	l := withStdin(&Launch{
		Program: in.DenoPath,
		Target:  DenoTarget,
		Args:    args,
		Env:     Environ(append(denoEnv(), "TMPDIR="+ScratchDir), guest.Env),
		Dir:     JobDir,
		Files:   files,
		Copies:  copies,
		Channel: true,
	}, guest.Stdin)
	if guest.Packages != "" {
		withPackages(l, guest.Packages)
	}
	return l, nil
}

// withPackages lets a Deno run import npm: packages from the view at dir
// and nothing else: the view is bound read-only at PackagesDir and is
// DENO_DIR, whose npm cache --cached-only resolves from without a network
// (Deno falls back to in-memory caches for what it cannot write there, so
// the warm cache is not copied in). --no-npm goes; all else stays.
func withPackages(l *Launch, dir string) {
	l.Binds = append(l.Binds, Bind{Source: dir, Target: PackagesDir})
	l.Copies = nil
	l.Args = slices.DeleteFunc(l.Args, func(a string) bool { return a == "--no-npm" })
	widenRead(l.Args, PackagesDir)
	for i, e := range l.Env {
		if strings.HasPrefix(e, "DENO_DIR=") {
			l.Env[i] = "DENO_DIR=" + PackagesDir
		}
	}
}

// widenRead adds dir to the read scope of Deno's command line args.
func widenRead(args []string, dir string) {
	for i, a := range args {
		if strings.HasPrefix(a, "--allow-read=") {
			args[i] = a + "," + dir
		}
	}
}

// checkEntry is the entry of a type-checked run: Deno checks the modules
// an entry imports statically, and the bootstrap imports the job's
// dynamically, by a name it learns at run time.
const checkEntry = GuestDir + "/check.ts"

// checkSource is checkEntry's text: the job's module imported for its
// types only (it is not evaluated here), then the bootstrap, which runs
// it. A type error stops Deno before any of it runs, with its report on
// stderr (TypeErrors reads it).
func checkSource(main string) []byte {
	return []byte("import type * as _job from " + strconv.Quote("file://"+main) + ";\nimport \"./bootstrap.js\";\n")
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

// typeCheckFailed ends Deno's report of a failed type check.
const typeCheckFailed = "error: Type checking failed."

// TypeErrors reads the type errors out of the stderr of a type-checked
// run that Deno stopped before it ran: a message naming the first error
// and its location (and how many more there are), and the whole report.
// ok is false when stderr is no such report.
func TypeErrors(stderr string) (message, report string, ok bool) {
	end := strings.Index(stderr, typeCheckFailed)
	if end < 0 || !strings.HasPrefix(stderr, "TS") {
		return "", "", false
	}
	report = strings.TrimSpace(stderr[:end])
	var first, at string
	count := 0
	for line := range strings.Lines(report) {
		line = strings.TrimSuffix(line, "\n")
		if _, msg, found := strings.Cut(line, " [ERROR]: "); found && strings.HasPrefix(line, "TS") {
			count++
			if first == "" {
				first = msg
			}
		}
		if rest, found := strings.CutPrefix(strings.TrimSpace(line), "at "); found && at == "" {
			at = rest
		}
	}
	if first == "" {
		return "", "", false
	}
	message = first
	if at != "" {
		message += " at " + at
	}
	if count > 1 {
		message += fmt.Sprintf(" (and %d more)", count-1)
	}
	return cutReport(message, maxReportMessage), cutReport(report, maxReport), true
}

// The message and report a result takes from a run's stderr are bounded:
// stderr is the guest's to write (it may forge Deno's report and exit),
// and the result holds them besides the stderr itself, escaped, where a
// control character, <, > or & takes six bytes: taken whole, a forged
// report made the response and the daemon's memory several times the
// output's, which alone is carried in at most twice its size.
const (
	maxReport        = 64 << 10
	maxReportMessage = 4 << 10
)

// cutReport returns s cut to at most n bytes, before a character, and
// marked, when it is longer.
func cutReport(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…[truncated]"
}

// stalledAwait is how Deno reports a top-level await that the empty event
// loop can never settle.
const stalledAwait = "error: Top-level await promise never resolved"

// UnsettledAwait reads Deno's report of a plain script whose top-level
// await can never settle (Deno's own: no event reaches the bootstrap) from
// its stderr: a message naming the await's place, and the report. ok is
// false when stderr holds no such report, or one about pmjail's files.
func UnsettledAwait(stderr string) (message, report string, ok bool) {
	i := strings.LastIndex(stderr, stalledAwait)
	if i < 0 {
		return "", "", false
	}
	report = cutReport(strings.TrimSpace(strings.TrimPrefix(stderr[i:], "error: ")), maxReport)
	at := ""
	for line := range strings.Lines(report) {
		line = strings.TrimSuffix(line, "\n")
		if rest, found := strings.CutPrefix(strings.TrimSpace(line), "at "); found {
			at = strings.TrimSuffix(rest[strings.Index(rest, "(")+1:], ")")
			break
		}
	}
	if !strings.HasPrefix(at, "file://"+JobDir+"/") {
		return "", "", false
	}
	return cutReport("the script's top-level await never settled at "+at, maxReportMessage) + ": nothing (no timer, I/O or broker call) was left to settle it", report, true
}
