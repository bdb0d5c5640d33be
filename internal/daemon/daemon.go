// Package daemon is pmjail's daemon: the socket API, its metrics and
// systemd integration, and the job supervisor behind them. It is a role of
// two binaries: pmjail-serve, built by the Makefile so that the daemon's
// dependencies (the HTTP server, the Prometheus client, go-systemd) stay
// out of the CLI, whose start-up every `pmjail run` pays; and pmjail
// itself when built alone (`go install ./cmd/pmjail`), whose `serve` runs
// it in-process when no pmjail-serve of its build sits beside it.
package daemon

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/cliflag"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/jail/rootfs"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/server"
)

// exitFailure is the exit code of a daemon that could not start or stopped
// on an error.
const exitFailure = 125

// exitInvalidConfig is the exit code of --check-config for a config it
// refuses: the check worked, its answer is no.
const exitInvalidConfig = 1

// queueStartTimeout bounds the set-up of the queue worker: reaching a
// NATS server and binding the stream, consumer and bucket.
const queueStartTimeout = 30 * time.Second

// Main runs the daemon, `pmjail serve [--socket PATH] [--config FILE]
// [--check-config]` with args the flags, until a signal stops it, and
// returns the process's exit code: SIGTERM/SIGINT drain and stop it,
// SIGHUP reloads the config. version is what the daemon reports as its
// own. With --check-config it loads and checks the config, says OK or
// what is wrong, and starts nothing.
func Main(args []string, version string) int {
	// The log is JSON from the first line, a failure to start included:
	// whatever collects the daemon's lines parses every one.
	// A log reader that goes (`pmjail serve 2>&1 | ...`, its reader
	// ended or restarted) must not take the daemon and its runs with it:
	// caught, SIGPIPE makes the log's writes fail with EPIPE rather than
	// kill the process (Go's default on stderr). A handler, not SIG_IGN,
	// which the jobs' processes would inherit.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	level := new(slog.LevelVar)
	logger := server.NewLogger(os.Stderr, level)
	fail := func(err error) int {
		logger.Error("not started", "err", err)
		return exitFailure
	}

	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	sock := fs.String("socket", "", "the Unix socket to listen on, `PATH` (default: the config's, or "+server.DefaultSocketPath+")")
	cfgPath := fs.String("config", "", "the daemon's config `FILE` (JSON)")
	check := fs.Bool("check-config", false, "load and check the config, print OK or what is wrong, and exit (0 valid, 1 invalid) without starting")
	if err := cliflag.Parse(fs, args); err != nil {
		if cliflag.Help(fs, "serve [--socket PATH] [--config FILE] [--check-config]", err) {
			return 0
		}
		return fail(fmt.Errorf("serve: %w", err))
	}
	if fs.NArg() != 0 {
		return fail(fmt.Errorf("serve: unexpected arguments %q", fs.Args()))
	}
	cfg, err := loadServeConfig(*cfgPath, *sock)
	// An empty value read as no flag at all: `--config "$CFG"` with CFG
	// unset started a daemon on the defaults, and said nothing.
	fs.Visit(func(f *flag.Flag) {
		if f.Value.String() == "" && (f.Name == "config" || f.Name == "socket") && !errors.Is(err, errEmptyFlag) {
			cfg, err = nil, fmt.Errorf("--%s: %w (leave the flag out for the default)", f.Name, errEmptyFlag)
		}
	})
	if *check {
		if err == nil {
			err = checkHost(cfg, *cfgPath)
		}
		return checkConfig(os.Stdout, os.Stderr, err)
	}
	if err != nil {
		return fail(fmt.Errorf("serve: %w", err))
	}
	lvl, _ := cfg.Level()
	level.Set(lvl)

	// The store of async runs is in the state directory the unit gives
	// (StateDirectory=), unless the config's runs.dir names another.
	opt := server.Options{Logger: logger, Version: version, StateDir: os.Getenv(runtimes.EnvStateDir)}
	if opt.Install, err = runtimes.Locate(); err == nil {
		err = opt.Install.CheckDirs()
	}
	if err != nil {
		return fail(fmt.Errorf("serve: %w", err))
	}
	opt.Install.Warmer = job.Warm
	if mgr, err := cgroup.NewManager(); err != nil {
		opt.CgroupReason = err.Error()
		logger.Warn("running without job cgroups", "reason", err)
	} else {
		opt.Cgroups = mgr
	}
	// The socket first: Listen binds it under umask 0777, which is the
	// process's, so nothing may start a jail or write a file meanwhile
	// (the Pyodide build below, the warm runtimes server.New starts).
	ln, activated, err := server.Listen(cfg.Socket)
	if err != nil {
		return fail(fmt.Errorf("serve: %w", err))
	}
	// The Pyodide snapshot and warm cache are built in the background:
	// Python runs start cold until they are ready, and no request waits.
	go func() {
		if p, err := opt.Install.Prepare(context.Background()); err != nil {
			logger.Warn("python snapshot not prepared; python runs start cold", "err", err)
		} else {
			logger.Info("python prepared", "snapshot", p.Snapshot.Path)
		}
	}()
	// Trees of links to libraries an upgrade has since replaced, before any
	// run can take one.
	for _, old := range rootfs.PruneLinks(opt.Install.StateDir) {
		logger.Info("removed stale library links", "dir", old)
	}
	// Work directories of builds a killed daemon or prepare left; the
	// build started above makes a fresh one, too young to be taken.
	for _, old := range append(opt.Install.PruneBuilds(time.Now()), packages.Open(opt.Install.StateDir).PruneWork(time.Now())...) {
		logger.Info("removed the work directory of a killed build", "dir", old)
	}
	srv, err := server.New(cfg, opt) // sweeps what a dead instance left
	if err != nil {
		ln.Close()
		return fail(fmt.Errorf("serve: %w", err))
	}
	// A start that fails from here on ends what the server started (its
	// warm runtimes and init stages started ahead, and the cgroups they
	// wait with) rather than leave it to the next start's sweep.
	abandon := func(err error) int {
		ln.Close()
		if serr := srv.Shutdown(0); serr != nil {
			logger.Warn("shutdown of the server not started", "err", serr)
		}
		return fail(err)
	}
	// The queue's jobs start only once the socket is bound: a daemon that
	// cannot serve its socket takes none.
	qctx, cancelQueue := context.WithTimeout(context.Background(), queueStartTimeout)
	err = srv.StartQueue(qctx)
	cancelQueue()
	if err != nil {
		return abandon(fmt.Errorf("serve: %w", err))
	}
	var metricsLn net.Listener
	if cfg.Metrics.Listen != "" {
		if metricsLn, err = net.Listen("tcp", cfg.Metrics.Listen); err != nil {
			return abandon(fmt.Errorf("serve: metrics.listen: %w", err))
		}
		// Logged before the socket answers: the address is known (a
		// listen port of 0 picks one) by the time a client is served.
		logger.Info("serving metrics", "listen", metricsLn.Addr().String())
	}

	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	served := make(chan error, 2)
	go func() { served <- srv.Serve(ln) }()
	if metricsLn != nil {
		go func() {
			if err := srv.ServeMetrics(metricsLn); err != nil {
				served <- fmt.Errorf("metrics: %w", err)
			}
		}()
	}
	wdCtx, stopWatchdog := context.WithCancel(context.Background())
	defer stopWatchdog()
	go srv.Watchdog(wdCtx)
	if init := jail.FindInitStage(); init.Self {
		// Said once at start: the daemon keeps this choice until it restarts.
		logger.Warn("the jobs' init stage is this binary; a pmjail-init of the same build beside it starts faster and, pure Go, also empties its other threads' capabilities",
			"reason", init.Reason)
	}
	logger.Info("serving", "socket", ln.Addr().String(), "socket_activated", activated, "pid", os.Getpid(),
		"max_concurrency", cfg.MaxConcurrency, "max_queue", cfg.MaxQueue)
	server.Notify(logger, server.NotifyReady)

	for {
		select {
		case err := <-served:
			server.Notify(logger, server.NotifyStopping)
			logger.Error("stopped on an error", "err", err)
			// Its runs end as a shutdown's do (an async one's end is
			// stored, not lost), and what it started goes with it.
			if err := srv.Shutdown(0); err != nil {
				logger.Error("shutdown", "err", err)
			}
			return exitFailure
		case sig := <-sigs:
			if sig == syscall.SIGHUP {
				server.Notify(logger, server.NotifyReloading)
				var next *server.Config
				err := srv.ReloadFrom(func() (*server.Config, error) {
					c, err := loadServeConfig(*cfgPath, *sock)
					next = c
					return c, err
				})
				if err != nil {
					logger.Error("config reload refused; keeping the old config", "err", err)
				} else if l, err := next.Level(); err == nil {
					level.Set(l)
				}
				server.Notify(logger, server.NotifyReady)
				continue
			}
			server.Notify(logger, server.NotifyStopping)
			grace := time.Duration(srv.Config().ShutdownGrace)
			logger.Info("stopping", "signal", sig.String())
			if err := srv.Shutdown(grace); err != nil {
				logger.Error("shutdown", "err", err)
				return exitFailure
			}
			logger.Info("stopped")
			return 0
		}
	}
}

// loadServeConfig reads the config; --socket overrides its socket path.
// errEmptyFlag is --config or --socket given an empty path.
var errEmptyFlag = errors.New("empty path")

func loadServeConfig(path, sock string) (*server.Config, error) {
	cfg, err := server.LoadConfig(path)
	if err != nil {
		return nil, err
	}
	if sock != "" {
		cfg.Socket.Path = sock
	}
	return cfg, nil
}

// checkHost checks what of the config the start checks against the
// host, not the file: the packages the ceiling names are in the store
// (server.New refuses to start otherwise).
func checkHost(cfg *server.Config, path string) error {
	if len(cfg.Ceiling.Packages) == 0 {
		return nil
	}
	install, err := runtimes.Locate()
	if err != nil {
		return fmt.Errorf("config %s: ceiling.packages: %w", path, err)
	}
	if err := cfg.CheckPackages(install); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// checkConfig answers --check-config for the outcome of loading the
// config: OK on stdout, or the error, which names the field at fault, on
// stderr. Its lines are for a person or a script, not a log.
func checkConfig(stdout, stderr io.Writer, err error) int {
	if err != nil {
		fmt.Fprintf(stderr, "pmjail: %v\n", err)
		return exitInvalidConfig
	}
	fmt.Fprintln(stdout, "OK")
	return 0
}
