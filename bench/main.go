package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Bench holds the paths and settings every section uses.
type Bench struct {
	Root       string // the repository root (the working directory)
	Pmjail     string // the pmjail binary under test
	Deno       string // the pinned Deno
	PyodideDir string
	Work       string // scratch files, outside any project folder
	Reps       int    // measured rounds per latency comparison
	PyReps     int    // the same for the (slow) Python comparison
	Soak       int    // sequential `pmjail exec -- /bin/true` runs
	SoakDeno   int    // sequential Deno hello runs
	Report     *Report
	Daemon     *Daemon // nil when the daemon could not be started
	// trueAdded is the start-up cost pmjail and bwrap add to /usr/bin/true
	// (set by the native section, used to isolate per-syscall costs).
	trueAdded *startCost
}

var sectionOrder = []string{
	"deno",
	"native",
	"phases",
	"python",
	"broker",
	"fetch",
	"seccomp",
	"memory",
	"daemon",
	"warm",
	"async",
	"queue",
	"soak",
	"gobench",
	"packages",
	"files",
}

func main() {
	// -origin is the loopback origin the broker section starts as a
	// process of its own (see loopbackOrigin).
	if len(os.Args) == 2 && os.Args[1] == "-origin" {
		os.Exit(serveOrigin())
	}
	os.Exit(run())
}

func run() int {
	b := &Bench{Report: &Report{}}
	out := flag.String("out", "BENCHMARKS.md", "where to write the report (- for stdout)")
	only := flag.String("only", "", "comma-separated sections to run (default all: "+strings.Join(sectionOrder, ",")+")")
	flag.StringVar(&b.Pmjail, "pmjail", "bin/pmjail", "the pmjail binary (built by make build when missing)")
	flag.IntVar(&b.Reps, "reps", 30, "measured rounds per latency comparison (a Deno hello's median moves by a millisecond between runs of 15)")
	flag.IntVar(&b.PyReps, "py-reps", 5, "measured rounds of the Python comparison")
	flag.IntVar(&b.Soak, "soak", 300, "sequential `pmjail exec -- /bin/true` runs in the soak")
	flag.IntVar(&b.SoakDeno, "soak-deno", 200, "sequential Deno hello runs in the soak (the first and last hundred are compared)")
	full := flag.Bool("full-soak", false, "the full soak: 2000 native and 200 Deno runs")
	flag.Parse()
	if *full {
		b.Soak, b.SoakDeno = 2000, 200
	}
	want := map[string]bool{}
	for _, s := range strings.Split(*only, ",") {
		if s = strings.TrimSpace(s); s != "" {
			want[s] = true
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := b.setup(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	}
	defer os.RemoveAll(b.Work)

	started := time.Now()
	sections := map[string]func(context.Context) error{
		"deno":     b.denoHello,
		"native":   b.nativeTrue,
		"phases":   b.phaseBreakdown,
		"python":   b.pythonHello,
		"broker":   b.broker,
		"fetch":    b.fetch,
		"seccomp":  b.seccompCost,
		"memory":   b.memory,
		"daemon":   b.daemonThroughput,
		"warm":     b.warmHello,
		"async":    b.asyncThroughput,
		"queue":    b.queueThroughput,
		"soak":     b.soak,
		"gobench":  b.goBench,
		"packages": b.packagesImport,
		"files":    b.filesHello,
	}
	needDaemon := len(want) == 0 || want["deno"] || want["phases"] || want["daemon"] || want["soak"] || want["memory"] || want["files"]
	if needDaemon {
		d, err := StartDaemon(ctx, b)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench: daemon: %v\n", err)
			b.Report.Note("daemon sections skipped: %v", err)
		} else {
			b.Daemon = d
			defer d.Stop()
		}
	}
	failed := false
	for _, name := range sectionOrder {
		if len(want) > 0 && !want[name] {
			continue
		}
		if ctx.Err() != nil {
			break
		}
		fmt.Fprintf(os.Stderr, "bench: %s…\n", name)
		t := time.Now()
		if err := sections[name](ctx); err != nil {
			failed = true
			fmt.Fprintf(os.Stderr, "bench: %s: %v\n", name, err)
			b.Report.Note("section %s failed: %v", name, err)
		}
		fmt.Fprintf(os.Stderr, "bench: %s done in %s\n", name, time.Since(t).Round(time.Second))
	}
	doc := b.render(time.Since(started))
	if *out == "-" {
		fmt.Print(doc)
	} else if err := os.WriteFile(*out, []byte(doc), 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		return 1
	} else {
		fmt.Fprintf(os.Stderr, "bench: wrote %s\n", *out)
	}
	if failed || ctx.Err() != nil {
		return 1
	}
	return 0
}

// setup finds the runtimes, builds pmjail when missing, makes sure the
// comparison tools are installed and writes the guest programs.
func (b *Bench) setup() error {
	var err error
	if b.Root, err = os.Getwd(); err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(b.Root, "cmd", "pmjail")); err != nil {
		return fmt.Errorf("run from the repository root (no cmd/pmjail here)")
	}
	modules := filepath.Join(b.Root, "node_modules")
	b.Deno = filepath.Join(modules, "@deno", "linux-x64-glibc", "deno")
	b.PyodideDir = filepath.Join(modules, "pyodide")
	if _, err := os.Stat(b.Deno); err != nil {
		return fmt.Errorf("no pinned Deno at %s: run `make setup` first", b.Deno)
	}
	// pmjail finds the same runtimes (and the same snapshot directory)
	// wherever the binary under test lives.
	os.Setenv("PMJAIL_RUNTIME_DIR", modules)
	if b.Pmjail, err = filepath.Abs(b.Pmjail); err != nil {
		return err
	}
	if _, err := os.Stat(b.Pmjail); err != nil {
		// `make build` builds pmjail with its init stage's binary.
		fmt.Fprintf(os.Stderr, "bench: no %s: running make build\n", b.Pmjail)
		cmd := exec.Command("make", "build")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("build pmjail: %w", err)
		}
		if _, err := os.Stat(b.Pmjail); err != nil {
			return fmt.Errorf("no pmjail at %s after make build: %w", b.Pmjail, err)
		}
	}
	for bin, pkg := range map[string]string{"bwrap": "bubblewrap", "/usr/bin/time": "time"} {
		if err := ensureTool(bin, pkg); err != nil {
			return err
		}
	}
	if err := b.settleBinaries(); err != nil {
		return err
	}
	if b.Work, err = os.MkdirTemp("", "bench-work-"); err != nil {
		return err
	}
	files := map[string]string{
		"hello.js": "console.log(\"hello\");\n",
		"hello.py": "print('hello')\n",
		// The bare Pyodide baseline: no snapshot, the same Deno.
		"pyodide-hello.mjs": fmt.Sprintf("import { loadPyodide } from %q;\nconst py = await loadPyodide({ indexURL: %q });\npy.runPython(\"print('hello')\");\n",
			"file://"+filepath.Join(b.PyodideDir, "pyodide.mjs"), b.PyodideDir+"/"),
	}
	for name, text := range files {
		if err := os.WriteFile(filepath.Join(b.Work, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// buildNSLaunch builds bench/nslaunch into the scratch directory as
// pmjail-init is built (static, pure Go, no symbol table) and reads it
// into the page cache; only the Deno hello section runs it.
func (b *Bench) buildNSLaunch() (string, error) {
	bin := b.work("nslaunch")
	build := exec.Command("go", "build", "-ldflags=-s -w", "-o", bin, "./bench/nslaunch")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build bench/nslaunch: %w: %s", err, out)
	}
	return bin, settle(bin)
}

// ensureTool installs the Debian package that provides bin when it is
// missing, so that a fresh checkout after `make setup` can run the bench.
func ensureTool(bin, pkg string) error {
	if _, err := exec.LookPath(bin); err == nil {
		return nil
	}
	fmt.Fprintf(os.Stderr, "bench: installing %s\n", pkg)
	cmd := exec.Command("apt-get", "install", "-y", "-q", pkg)
	cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("install %s (for %s): %w", pkg, bin, err)
	}
	return nil
}

func (b *Bench) work(name string) string { return filepath.Join(b.Work, name) }
