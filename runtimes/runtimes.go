package runtimes

import (
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// Name identifies a guest runtime.
type Name string

// The runtimes pmjail knows.
const (
	Deno   Name = "deno"
	Python Name = "python"
)

// ErrUnknownRuntime is returned for a runtime name or file extension pmjail
// does not run.
var ErrUnknownRuntime = errors.New("unknown runtime")

// names maps each runtime name a job may give to the runtime it runs on.
// The names are exactly the OpenAPI document's enum: the socket API takes
// them as spelled there, so that a proxy that filters jobs by the runtime
// string sees what runs. The names of Deno say the program's dialect too
// (DialectOf): "ts" and "typescript" are TypeScript (types stripped),
// "jsx" and "tsx" JSX and TSX.
var names = map[string]Name{
	"deno": Deno, "js": Deno, "javascript": Deno, "ts": Deno, "typescript": Deno, "jsx": Deno, "tsx": Deno,
	"python": Python, "py": Python, "pyodide": Python,
}

// Names lists every name ParseName accepts, sorted.
func Names() []string { return slices.Sorted(maps.Keys(names)) }

// ParseName accepts a runtime name exactly as the socket API spells it
// (see Names); a caller that takes a person's spelling in any case, the
// CLI's --runtime, lower-cases it first.
func ParseName(s string) (Name, error) {
	if n, ok := names[s]; ok {
		return n, nil
	}
	return "", fmt.Errorf("%w %q (want one of %s)", ErrUnknownRuntime, s, strings.Join(Names(), ", "))
}

// Dialect is the language a Deno program's text is in, which says how
// Deno parses it: by its file's extension in a cold run, by its blob's
// media type in a warm runtime (which evaluates it from memory).
type Dialect string

// The dialects of a Deno program. TypeScript's and TSX's types are
// stripped, not checked (Guest.TypeCheck checks them).
const (
	JavaScript Dialect = "js"
	TypeScript Dialect = "ts"
	JSX        Dialect = "jsx"
	TSX        Dialect = "tsx"
)

// DialectOf is the dialect the runtime name s asks for: JavaScript for
// "deno", "js" and "javascript" (and for a name that is not Deno's).
func DialectOf(s string) Dialect {
	switch s {
	case "ts", "typescript":
		return TypeScript
	case "jsx":
		return JSX
	case "tsx":
		return TSX
	}
	return JavaScript
}

// Ext is the extension of a one-file program's file in the job's root:
// Deno reads a file's dialect by it.
func (d Dialect) Ext() string {
	switch d {
	case TypeScript, JSX, TSX:
		return "." + string(d)
	}
	return ".js"
}

// MediaType is the type of the blob a warm runtime evaluates the program
// from: the one Deno maps to the dialect (deno_media_type's
// from_content_type; a blob: URL has no extension to go by).
func (d Dialect) MediaType() string {
	switch d {
	case TypeScript:
		return "application/typescript"
	case JSX:
		return "text/jsx"
	case TSX:
		return "text/tsx"
	}
	return "application/javascript"
}

// ForFile picks the runtime from a file name's extension: .js, .mjs and
// .jsx run on Deno, .ts, .mts and .tsx on Deno with type stripping, .py
// on Pyodide.
func ForFile(name string) (Name, error) {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".js", ".mjs", ".jsx", ".ts", ".mts", ".tsx":
		return Deno, nil
	case ".py":
		return Python, nil
	}
	return "", fmt.Errorf("%w for %q: use a .js, .mjs, .jsx, .ts, .mts, .tsx or .py file or --runtime", ErrUnknownRuntime, name)
}

// Guest is what a runtime needs to know about one run.
type Guest struct {
	Runtime Name
	// Source is the guest program's text.
	Source []byte
	// Dialect is the language of Deno's Source (JavaScript when empty);
	// Files name theirs by their extensions.
	Dialect Dialect
	// MemoryBytes is the job's memory limit; the V8 heap is capped below it so
	// that a host without a cgroup still has a memory bound.
	MemoryBytes int64
	// CoarseTime switches on the timing mitigation (coarse clocks, no
	// SharedArrayBuffer).
	CoarseTime bool
	// Packages is the host directory of the job's package view (package
	// packages), bound read-only at PackagesDir; empty for none.
	Packages string
	// TypeCheck runs Deno's type checker on the program before it runs
	// (deno run --check), in the same jail, offline.
	TypeCheck bool
	// Files, when set, is the program as several files in place of
	// Source: paths relative to JobDir (checked by package job), and
	// Entry the one that runs.
	Files map[string]string
	Entry string
	// Env is the program's own variables (names checked by package job):
	// added to Deno's environment, readable by exactly these names, or
	// given to Python's os.environ by the loader. Stdin is the program's
	// standard input.
	Env   map[string]string
	Stdin []byte
}

// Launch is everything the jail must assemble for one run: a program to
// exec inside the new root, the files bound into that root read-only, and
// the files written into it.
type Launch struct {
	// Program is the host path of the executable; the jail binds it (and the
	// shared libraries it loads) at Target.
	Program string
	Target  string
	// Args is argv inside the jail, Args[0] included.
	Args []string
	// Env is the complete environment; nothing of pmjail's own is inherited.
	Env []string
	// Dir is the working directory inside the root; empty for the root's
	// own. A runtime's is JobDir, so that a relative path names a job
	// file, as it would where the program's author ran it.
	Dir string
	// Binds are host paths bound read-only into the root.
	Binds []Bind
	// Files are written into the root before it is made read-only.
	Files []File
	// Copies are writable per-run copies of read-only host directories.
	Copies []Copy
	// Channel asks the jail for the guest channel's FIFOs.
	Channel bool
	// Stdin is the path, among Files, of the program's standard input;
	// empty for none (/dev/null).
	Stdin string
	// Start says how the runtime starts, for the result: for Python
	// "snapshot" or "cold: <why>" (see PythonStart); empty for others.
	Start string
}

// Copy gives the guest its own writable copy of the host directory Source
// at Target (below TmpDir): writes land on the run's own /tmp and vanish
// with it, and the shared host directory never changes. (Not overlayfs: a
// copy-up of a file owned by an id the job's namespace does not map fails.)
type Copy struct {
	Source string
	Target string
}

// Bind maps a host path to a path inside the job's root, read-only.
type Bind struct {
	Source string
	Target string
	// Exec lets the guest execute files under it (an operator's --ro-bind
	// of tools); runtime assets are bound noexec.
	Exec bool
}

// File is a file created inside the job's root.
type File = layout.File

// Paths inside every job's root (package layout).
const (
	GuestDir   = layout.GuestDir
	JobDir     = layout.JobDir
	RuntimeDir = layout.RuntimeDir
	TmpDir     = layout.TmpDir
	ScratchDir = layout.ScratchDir
	// DenoTarget is where Deno is bound, and what the jail execs.
	DenoTarget = RuntimeDir + "/deno"

	ChannelOut = layout.ChannelOut

	// PackagesDir holds the job's vetted packages, read-only: for Deno it
	// is DENO_DIR (its npm cache), for Python its python/ is on sys.path.
	PackagesDir = "/packages"
	StdinFile   = layout.StdinFile
)

// jobFiles are the files of a several-file program under JobDir, and the
// in-jail path of its entry.
func jobFiles(files map[string]string, entry string) ([]File, string) {
	out := make([]File, 0, len(files))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		out = append(out, File{Path: JobDir + "/" + p, Data: []byte(files[p]), Mode: 0o444})
	}
	return out, JobDir + "/" + entry
}

// SetStdin gives the program stdin as its standard input: a file of the
// root that the init stage opens as fd 0 (see Launch.Stdin). Nothing
// leaves /dev/null there.
func (l *Launch) SetStdin(stdin []byte) {
	if len(stdin) > 0 {
		l.Files = append(l.Files, File{Path: StdinFile, Data: stdin, Mode: 0o444})
		l.Stdin = StdinFile
	}
}

// withStdin is l after l.SetStdin(stdin).
func withStdin(l *Launch, stdin []byte) *Launch {
	l.SetStdin(stdin)
	return l
}

// Environ is base and then env as NAME=VALUE, sorted by name.
func Environ(base []string, env map[string]string) []string {
	out := slices.Clone(base)
	for _, k := range slices.Sorted(maps.Keys(env)) {
		out = append(out, k+"="+env[k])
	}
	return out
}
