package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/capread"
	"github.com/pmjail/pmjail/internal/cliflag"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
)

// runFlags are the flags `run`, `exec` and `submit` share.
type runFlags struct {
	fs      *flag.FlagSet
	runtime string
	profile string
	mode    string
	input   string
	jsonOut bool
	check   bool
	caps    []string
	memory  sizeFlag
	output  sizeFlag
	cpuTime durationFlag
	timeout durationFlag
	pids    int64
	roBinds []string
	require []string
	forExec bool
	// packages narrows what a run may import (run's --packages).
	packages *[]packages.Ref
	entry    string
	env      []string
	noStdin  bool
}

func newRunFlags(name string, forExec bool) *runFlags {
	f := &runFlags{fs: flag.NewFlagSet(name, flag.ContinueOnError), forExec: forExec}
	fs := f.fs
	fs.SetOutput(io.Discard)
	if !forExec {
		fs.Func("runtime", "`RUNTIME`: deno or python (default: from the file extension)", func(v string) error {
			// Typed by a person: any case, sent on in the one the socket
			// API takes (pmjail submit's job crosses it).
			v = strings.ToLower(v)
			if _, err := runtimes.ParseName(v); err != nil {
				return errors.New("unknown runtime (want deno or python)")
			}
			f.runtime = v
			return nil
		})
		fs.Func("cap", "a capability, `CAP`: log, or request=ORIGINS[:METHODS] (repeatable)", func(s string) error {
			f.caps = append(f.caps, s)
			return nil
		})
		fs.Func("input", "the job's input: `JSON`, or @file", func(v string) error {
			// An empty value is no JSON: taken as no input, a --input "$X"
			// whose X was unset ran the job on null without a word.
			if strings.TrimSpace(v) == "" {
				return errors.New("empty: want one JSON value, or @file (leave --input out for no input)")
			}
			f.input = v
			return nil
		})
		fs.BoolVar(&f.check, "check", false, "type-check a Deno program (TypeScript) before it runs; a type error fails the run")
		fs.StringVar(&f.entry, "entry", "", "with a DIR, the `FILE` in it that runs (default: the first it holds of "+strings.Join(api.DefaultEntries, ", ")+")")
	} else {
		fs.Func("ro-bind", "bind `SRC[:DST]` read-only (repeatable)", func(s string) error {
			f.roBinds = append(f.roBinds, s)
			return nil
		})
	}
	fs.StringVar(&f.profile, "profile", "", "hardening profile: a built-in `NAME` or a file")
	modeFlag(fs, &f.mode)
	fs.BoolVar(&f.jsonOut, "json", false, "print the result object instead of passing output through")
	fs.Var(&f.memory, "memory", "memory limit, `SIZE` such as 128M")
	fs.Var(&f.output, "output-limit", "output limit per stream, `SIZE` such as 1M")
	fs.Var(&f.cpuTime, "cpu-time", "CPU-time limit, `DURATION` such as 5s")
	fs.Var(&f.timeout, "timeout", "wall-clock limit, `DURATION` such as 30s")
	fs.Func("pids", "task limit, `N` (threads count)", func(v string) error {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n <= 0 {
			return errors.New("want a whole number above zero")
		}
		f.pids = n
		return nil
	})
	fs.Func("env", "add `NAME=VALUE` to the program's environment (repeatable)", func(s string) error {
		f.env = append(f.env, s)
		return nil
	})
	fs.BoolVar(&f.noStdin, "no-stdin", false, "give the program an empty stdin instead of pmjail's own")
	if name != "submit" { // a daemon's operator sets what its runs require
		requireFlag(fs, &f.require, "`LAYERS` mode required insists on besides the core, comma-separated")
	}
	return f
}

type sizeFlag struct{ v profiles.Size }

func (s *sizeFlag) String() string { return s.v.String() }
func (s *sizeFlag) Set(v string) (err error) {
	s.v, err = profiles.ParseSize(v)
	if err == nil && s.v == 0 {
		err = errors.New("must be above zero")
	}
	return err
}

type durationFlag struct{ v profiles.Duration }

func (d *durationFlag) String() string { return d.v.String() }
func (d *durationFlag) Set(v string) (err error) {
	// profiles.ParseDuration reads a bare number as milliseconds, as the
	// JSON job's numbers are; typed on a command line, `--timeout 5` is
	// meant as seconds as often as not, so it takes a unit.
	if n := strings.TrimSpace(v); n != "" && strings.Trim(n, "0123456789.") == "" {
		return fmt.Errorf("needs a unit, such as %[1]ss or %[1]sms", n)
	}
	if d.v, err = profiles.ParseDuration(v); err != nil {
		// Its message offers milliseconds, which a flag does not take.
		return fmt.Errorf("invalid duration %q (want e.g. 2s, 500ms or 1m)", v)
	}
	if d.v == 0 {
		err = errors.New("must be above zero")
	}
	return err
}

// request builds the job object the flags describe.
func (f *runFlags) request() (*job.Request, error) {
	req := &job.Request{
		Runtime:   f.runtime,
		Mode:      f.mode,
		Profile:   f.profile,
		TypeCheck: f.check,
		Limits: profiles.Limits{
			Memory: f.memory.v, Output: f.output.v,
			CPUTime: f.cpuTime.v, Timeout: f.timeout.v, Pids: f.pids,
		},
	}
	for _, c := range f.caps {
		if err := ipc.ParseCapFlag(c, &req.Capabilities); err != nil {
			return nil, err // it names the flag
		}
	}
	if f.input != "" {
		data := []byte(f.input)
		if strings.HasPrefix(f.input, "@") {
			var err error
			if data, err = readCapped(f.input[1:], job.MaxInputBytes); err != nil {
				return nil, fmt.Errorf("--input: %w", err)
			}
		}
		// Not checked here: job.Resolve checks it once, strictly (a key
		// twice is refused), and fieldFlags words its refusal as --input's.
		req.Input = data
	}
	if err := f.environment(req); err != nil {
		return nil, err
	}
	return req, nil
}

// readCapped reads a file (or stdin for "-") of at most max bytes.
func readCapped(name string, max int64) ([]byte, error) {
	if name == "-" {
		return capread.Reader(os.Stdin, "stdin", max)
	}
	return capread.File(name, max)
}

// Synopses of the commands that take run flags, for their --help.
const (
	runSynopsis    = "run [flags] FILE|DIR|-"
	execSynopsis   = "exec [flags] [--ro-bind SRC[:DST]]... -- PROGRAM [ARGS]"
	submitSynopsis = "submit [--socket PATH | --nats URLS [--tenant T] [--id ID]] [flags] FILE|DIR|-"
)

func cmdRun(args []string) int {
	f := newRunFlags("run", false)
	f.fs.Func("packages", "the stored packages the job may import, `REFS` (comma-separated; default: all in the store)", func(v string) error {
		if v == "" {
			f.packages = &[]packages.Ref{}
			return nil
		}
		refs, err := packages.ParseRefs(strings.Split(v, ","))
		f.packages = &refs
		return err
	})
	req, err := f.programRequest(args)
	if err != nil {
		return commandFailure(f.fs, runSynopsis, err)
	}
	return f.execute(req)
}

// programRequest parses `[flags] FILE|DIR|-` into the job they describe: the
// runtime from --runtime or the file's extension, the source from the file
// (or stdin), capped.
func (f *runFlags) programRequest(args []string) (*job.Request, error) {
	if err := cliflag.Parse(f.fs, args); err != nil {
		return nil, err
	}
	if f.fs.NArg() != 1 {
		return nil, fmt.Errorf("want exactly one FILE, DIR or - (stdin), got %d arguments", f.fs.NArg())
	}
	file := f.fs.Arg(0)
	req, err := f.request()
	if err != nil {
		return nil, err
	}
	if file != "-" {
		st, err := os.Stat(file)
		var pe *fs.PathError
		if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
			// Named as missing before its extension is looked at: `run app/`
			// for a directory not there is not a program of an unknown runtime.
			return nil, fmt.Errorf("%s: %w", file, pe.Err)
		}
		if err == nil && st.IsDir() {
			return req, f.directory(req, file)
		}
	}
	if f.entry != "" {
		return nil, errors.New("--entry: names a file of a DIR, and the program is one file")
	}
	if err := f.stdin(req, file == "-"); err != nil {
		return nil, err
	}
	if req.Runtime == "" {
		if file == "-" {
			return nil, errors.New("reading the program from stdin needs --runtime deno|python")
		}
		if _, err := runtimes.ForFile(file); err != nil {
			return nil, err
		}
		req.Runtime = runtimeForFile(file)
	}
	src, err := readCapped(file, job.MaxSourceBytes)
	if err != nil {
		return nil, err
	}
	req.Source = string(src)
	return req, nil
}

// runtimeForFile names the runtime, keeping Deno's dialects distinct so
// that the source is parsed as its extension says (runtimes.DialectOf).
func runtimeForFile(file string) string {
	switch strings.ToLower(filepath.Ext(file)) {
	case ".ts", ".mts":
		return "typescript"
	case ".jsx":
		return "jsx"
	case ".tsx":
		return "tsx"
	case ".py":
		return "python"
	}
	return "deno"
}

func cmdExec(args []string) int {
	f := newRunFlags("exec", true)
	// The program's command line starts at "--" or at the first argument
	// that is not a flag: its flags are its own.
	if err := cliflag.ParseHead(f.fs, args); err != nil {
		return commandFailure(f.fs, execSynopsis, err)
	}
	if f.fs.NArg() < 1 {
		return fail("exec: want -- PROGRAM [ARGS]")
	}
	req, err := f.request()
	if err != nil {
		return fail("exec: %v", err)
	}
	req.Exec = &job.Exec{Program: f.fs.Arg(0), Args: f.fs.Args()[1:], Binds: f.roBinds}
	if err := f.stdin(req, false); err != nil {
		return fail("exec: %v", err)
	}
	return f.execute(req)
}

// execute resolves and runs a request in this process and reports it; the
// CLI's user is its own operator, so --require adds to the ceiling.
func (f *runFlags) execute(req *job.Request) int {
	ceil := job.DefaultCeiling()
	ceil.Required = f.require
	switch {
	case f.packages != nil:
		ceil.Packages = *f.packages
	case req.Exec == nil:
		ceil.Packages = storedPackages()
	}
	resolved, err := job.Resolve(req, ceil, true)
	if err != nil {
		return fail("%s: %s", f.fs.Name(), f.refusal(err))
	}
	if err := checkPrivilege(); err != nil {
		return fail("%s: %v", f.fs.Name(), err)
	}
	runner, err := newRunner(req.Exec == nil, true)
	if err != nil {
		return fail("%v", err)
	}
	if ahead := prestart(runner, resolved); ahead != nil {
		defer ahead.Close()
	}
	ctx, stop := signalContext()
	defer stop()
	if resolved.Runtime == runtimes.Python && runner.Install != nil {
		// The first Python run on a host builds the snapshot and the warm
		// code cache (seconds, once); a failure only means a cold start.
		if err := runner.Install.PreparePython(ctx); err != nil {
			fmt.Fprintf(os.Stderr, "pmjail: %s; Python starts cold\n", oneLine(err))
		}
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var opt job.Options
	if !f.jsonOut {
		gone := func() { cancel(errOutputGone) }
		opt.Stdout, opt.Stderr = untilBroken(stdout, gone), untilBroken(os.Stderr, gone)
	}
	res := runner.Run(ctx, resolved, opt)
	return report(res, f.jsonOut)
}

// fieldFlags names the flag that sets each job field a command-line job can
// be refused for.
var fieldFlags = map[string]string{
	"profile":         "profile",
	"limits.memory":   "memory",
	"limits.cpu_time": "cpu-time",
	"limits.timeout":  "timeout",
	"limits.pids":     "pids",
	"limits.output":   "output-limit",
	"input":           "input",
	"entry":           "entry",
}

// refusal words job.Resolve's refusal for the command line.
func (f *runFlags) refusal(err error) string {
	return f.flagged(job.Refusal(err))
}

// flagged names a refused job field by the flag the user set it with
// ("--memory: 8M is below the 16M minimum", not "limits.memory: …"); a
// message about a field no flag set is kept as it is.
func (f *runFlags) flagged(msg, field string) string {
	if strings.HasPrefix(field, "env") && len(f.env) > 0 {
		return "--env: " + msg
	}
	name, known := fieldFlags[field]
	if !known {
		return msg
	}
	set := false
	f.fs.Visit(func(fl *flag.Flag) { set = set || fl.Name == name })
	if !set {
		return msg
	}
	return "--" + name + ": " + strings.TrimPrefix(msg, field+": ")
}

// report prints a result — the object with --json; otherwise a handler's
// value, one line of JSON on stdout after the output that has passed
// through already, and one line for a run that pmjail ended or the guest's
// stack for one that threw, on stderr — and returns the exit code.
func report(res *jail.Result, jsonOut bool) int {
	if jsonOut {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(res)
		return exitCode(res)
	}
	if line, ok := valueLine(res.Value); ok {
		stdout.line(line)
	}
	switch {
	case res.Status != jail.StatusOK && res.Status != jail.StatusError && res.Error != nil:
		fmt.Fprintf(os.Stderr, "pmjail: %s: %s\n", res.Status, res.Error.Message)
	case res.Status == jail.StatusError && res.Error != nil && res.Error.Stack != "":
		fmt.Fprintln(os.Stderr, res.Error.Stack)
	}
	return exitCode(res)
}

// valueLine is a handler's value as one line of JSON, and false for none: a
// plain script has none, and a handler that returns nothing (undefined or
// null) has nothing to print.
func valueLine(v json.RawMessage) ([]byte, bool) {
	var b bytes.Buffer
	if len(v) == 0 || json.Compact(&b, v) != nil || b.String() == "null" {
		return nil, false
	}
	b.WriteByte('\n')
	return b.Bytes(), true
}

// newRunner finds the runtimes and the cgroups. A host without usable
// cgroups still runs (auto mode reports it). With lazyCgroups the cgroup
// manager only reads the layout: a run's own cgroup proves the hierarchies,
// and job.Runner probes them only if that cgroup cannot be made (the probe
// would make and remove a throwaway cgroup in each hierarchy every run).
func newRunner(needRuntimes, lazyCgroups bool) (*job.Runner, error) {
	rn := &job.Runner{Ceiling: job.DefaultCeiling()}
	if lvl := os.Getenv("PMJAIL_LOG"); lvl != "" {
		var l slog.Level
		if err := l.UnmarshalText([]byte(lvl)); err == nil {
			rn.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: l}))
		}
	}
	in, err := runtimes.Locate()
	if err != nil && needRuntimes {
		return nil, err
	}
	if in != nil && needRuntimes {
		if err := in.CheckDirs(); err != nil {
			return nil, err
		}
	}
	if in != nil {
		in.Warmer = job.Warm
	}
	rn.Install = in
	if in != nil {
		rn.Packages = packages.Open(in.StateDir)
	}
	newManager := cgroup.NewManager
	if lazyCgroups {
		newManager = cgroup.NewLazyManager
	}
	mgr, err := newManager()
	if err != nil {
		rn.CgroupReason = err.Error()
	} else {
		rn.Cgroups = mgr
		// Whatever a supervisor killed mid-run left behind goes first.
		_, _ = mgr.Sweep()
	}
	return rn, nil
}

// prestart starts the run's init stage (the clone into its namespaces, the
// exec of pmjail-init and its start-up) on a goroutine, while this process
// goes on to build the job: the run takes that child (jail.Pool with
// Await), as a daemon's run takes one of its pool's. The child is this
// run's alone, started for it, and knows nothing of the job until the run
// configures it. A run that probes the host first (mode required with
// --require) may leave namespaces out, so it starts its own. The returned
// pool, nil for none, must be closed once the run is over: a child the run
// did not take is killed then.
func prestart(rn *job.Runner, r *job.Resolved) *jail.Pool {
	if r.Mode == job.ModeRequired && len(r.Required) > 0 {
		return nil
	}
	// Never a second child: the one run takes the one started here.
	opt := jail.PoolOptions{Await: true, Spare: func() bool { return false }}
	if rn.Cgroups != nil {
		// The child's cgroup is reserved with it (on v2 it is born in it),
		// and the run gives it the job's limits before the child joins it
		// or runs anything of the job's.
		opt.Cgroups = job.NewCgroups(rn.Cgroups)
	}
	rn.Pool = jail.NewPool(1, opt)
	rn.Pool.Prestart(rootfs.Namespaces())
	return rn.Pool
}

// exitCode maps a result to the CLI's exit code: the guest's own when it
// ended by itself, otherwise the status's (jail.Status.ExitCode), except
// that a runtime or program which could not be found or executed keeps 127
// or 126.
func exitCode(res *jail.Result) int {
	switch res.Status {
	case jail.StatusOK, jail.StatusError:
		return res.ExitCode
	case jail.StatusInternalError, jail.StatusRefused:
		if res.ExitCode == exitNotExec || res.ExitCode == exitNotFound {
			return res.ExitCode
		}
	}
	if code, ok := res.Status.ExitCode(); ok {
		return code
	}
	return exitFailure
}
