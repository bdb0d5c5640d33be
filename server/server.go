package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/cgroup"
	"github.com/pmjail/pmjail/internal/logtext"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/queue"
	"github.com/pmjail/pmjail/runtimes"
)

// Timeouts of the HTTP layer. A run's own deadline is its wall-clock limit
// plus runSlack: the jail enforces the limit, this is the net beneath it.
const (
	readHeaderTimeout = 10 * time.Second
	bodyReadTimeout   = 30 * time.Second
	idleTimeout       = 60 * time.Second
	resultTimeout     = 60 * time.Second
	runSlack          = 30 * time.Second
	drainCancelWait   = 30 * time.Second
	// maxHeaderBytes caps a request's line and headers. The API's
	// own are a few hundred bytes (an Idempotency-Key is at most 255);
	// net/http's default, a megabyte, let each of a peer's connections
	// hold about twice that of the daemon's heap for readHeaderTimeout
	// before any body slot, times the connection cap.
	maxHeaderBytes = 32 << 10
)

// Options are what a server needs besides its config.
type Options struct {
	// Install locates the runtimes (runtimes.Locate).
	Install *runtimes.Install
	// Cgroups creates job cgroups; nil when the host has none usable, and
	// then CgroupReason says why.
	Cgroups      *cgroup.Manager
	CgroupReason string
	// Logger receives the daemon's structured log; nil discards it.
	Logger *slog.Logger
	// Prober holds the host's posture, probed at start: every run decides
	// with it and GET /v1/posture serves it (?refresh=1, from the daemon's
	// own uid, probes again; a layer once proven stays proven).
	Prober *posture.Prober
	// Version is reported by GET /v1/health.
	Version string
	// StateDir is the daemon's state directory, where the store of async
	// runs lives unless the config's runs.dir names another; empty, and
	// without runs.dir, the daemon takes no async runs.
	StateDir string
}

// state is what a reload replaces; runs in flight keep the one they
// started with.
type state struct {
	cfg   *Config
	ceil  job.Ceiling
	peers peerSet
	// tenants are the config's, in its order; others is the peers that
	// match none, nil when the config refuses them.
	tenants []*tenant
	others  *tenant
}

// Server is the daemon's API.
type Server struct {
	opt   Options
	log   *slog.Logger
	state atomic.Pointer[state]
	lim   *limiter
	// freed is told when a slot of lim or of a tenant's share may be
	// free again (Freed, for the queue's worker).
	freed chan struct{}
	// bodies bounds the job bodies being read before admission.
	bodies *bodyGate
	// pool keeps init stages started ahead of runs, shared by every
	// Runner the server has had.
	pool *jail.Pool
	// warm keeps runtimes started ahead of runs, whole jails waiting for
	// a job, shared by every tenant's runner.
	warm    *jail.Warm
	metrics *metrics
	// refusals paces the log lines of refused requests per peer uid.
	refusals refusalLog
	// async is the async runs and their store; nil when the daemon has
	// no directory for it.
	async *asyncRuns
	http  *http.Server
	// metricsHTTP serves /metrics alone on the config's metrics.listen,
	// for a Prometheus that cannot reach the Unix socket.
	metricsHTTP *http.Server
	// shares are the tenants' slots and rates by name, kept across
	// reloads.
	sharesMu sync.Mutex
	shares   map[string]*share
	started  time.Time
	// lastReload is the outcome of the last reload, nil before the first.
	lastReload atomic.Pointer[api.Reload]

	// runCtx is every request's base context: cancelling it cancels every
	// run (the end of a shutdown's grace period).
	runCtx     context.Context
	cancelRuns context.CancelCauseFunc
	draining   atomic.Bool
	shutdownMu sync.Mutex
	// worker pulls the config's queue jobs (queue.go); nil without one.
	worker *queue.Worker

	// teardowns are the runs whose jails are still being torn down,
	// answered or not (runInSlot): Shutdown waits for them.
	teardowns sync.WaitGroup
}

// New builds a server and, before it takes any work, sweeps what a previous
// instance left behind.
func New(cfg *Config, opt Options) (*Server, error) {
	s := &Server{opt: opt, log: opt.Logger, started: time.Now(), shares: map[string]*share{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if opt.Cgroups != nil {
		// Crash recovery. A supervisor killed mid-run leaves its job
		// cgroups (named after its pid) with their tasks; Sweep kills
		// those tasks and removes the cgroups of every dead owner. A job's
		// files live only in its own mount namespace (a tmpfs root), which
		// the kernel frees with the job's last task, so there are no job
		// directories on the host to sweep.
		removed, err := opt.Cgroups.Sweep()
		if len(removed) > 0 {
			s.log.Warn("swept cgroups left by a previous instance", "count", len(removed), "cgroups", removed)
		}
		if err != nil {
			s.log.Error("sweep cgroups", "err", err)
		}
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	s.freed = make(chan struct{}, 1)
	s.lim = newLimiter(cfg.MaxConcurrency, cfg.queueLen())
	s.lim.freed = s.freed
	s.bodies = newBodyGate(bodyCaps(cfg.MaxConcurrency))
	// Empty until the first run says which namespaces to start children in.
	poolOpt := jail.PoolOptions{
		Spare:   s.spareCore,
		OnError: func(err error) { s.log.Warn("prestart", "err", err) },
	}
	if opt.Cgroups != nil {
		// Each waiting init stage holds its cgroup, made ahead: a run
		// only gives it its limits, and on cgroup v2, where a child is
		// born in its cgroup, runs can take one at all.
		poolOpt.Cgroups = job.NewCgroups(opt.Cgroups)
	}
	s.pool = jail.NewPool(cfg.poolSize(), poolOpt)
	// Warm runtimes are bounded by their cgroups alone: without one the
	// daemon keeps none.
	warmSizes := cfg.Warm
	if opt.Cgroups == nil {
		warmSizes = nil
	}
	s.warm = jail.NewWarm(warmSizes, jail.WarmOptions{
		Spare:   s.spareCore,
		OnError: func(err error) { s.log.Warn("warm runtime", "err", err) },
		MaxAge:  time.Duration(cfg.WarmMaxAge),
	})
	if s.opt.Prober == nil {
		s.opt.Prober = posture.NewProber(posture.Options{Install: opt.Install, Cgroups: opt.Cgroups, CgroupReason: opt.CgroupReason}, s.log)
	}
	st, err := s.newState(cfg)
	if err != nil {
		return nil, err
	}
	s.state.Store(st)
	s.prewarm(st)
	// Probe before accepting work, and say what protects the runs.
	report := s.postureReport(s.opt.Prober.Get(context.Background()))
	var applied, missing []string
	for _, l := range report.Layers {
		switch l.State {
		case posture.Applied:
			applied = append(applied, l.Name)
		case posture.Missing, posture.Degraded:
			missing = append(missing, l.Name+": "+l.Detail)
		}
	}
	s.log.Info("posture", "mode", report.Mode, "decision", report.Decision, "refusing_for", report.Missing,
		"cgroup", report.Cgroup.Mechanic, "applied", applied, "missing", missing, "notes", report.Notes)
	s.metrics = newMetrics(s.load, s.pool, s.warm, opt.Version)
	s.metrics.setPosture(report)
	s.metrics.addTenants(st)
	s.runCtx, s.cancelRuns = context.WithCancelCause(context.Background())
	if dir := asyncDir(cfg, opt.StateDir); dir != "" {
		if err := s.openAsync(dir, cfg.Runs); err != nil {
			// The pool and the warm runtimes have started filling:
			// their init stages, and the cgroups they wait with, go
			// with a server that never serves.
			s.warm.Close()
			s.pool.Close()
			s.opt.Prober.Close()
			return nil, err
		}
	} else {
		// Said at start, not only to the first client refused.
		s.log.Warn("async runs off: no runs.dir in the config and no $PMJAIL_STATE_DIR; async requests are refused 503 async_unavailable")
	}
	s.http = &http.Server{
		Handler:           s.Handler(),
		ConnContext:       cappedConnContext,
		BaseContext:       func(net.Listener) context.Context { return s.runCtx },
		ReadHeaderTimeout: readHeaderTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		IdleTimeout:       idleTimeout,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		// "OPTIONS *" is answered by the handler, as every request is,
		// not with net/http's empty 200.
		DisableGeneralOptionsHandler: true,
	}
	s.metricsHTTP = &http.Server{
		Handler:                      s.metricsHandler(),
		ReadHeaderTimeout:            readHeaderTimeout,
		MaxHeaderBytes:               maxHeaderBytes,
		DisableGeneralOptionsHandler: true,
		ReadTimeout:                  metricsReadTimeout,
		WriteTimeout:                 metricsWriteTimeout,
		IdleTimeout:                  metricsIdleTimeout,
		ErrorLog:                     slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
	}
	return s, nil
}

// CheckPackages refuses a config whose ceiling names a package the store
// of install does not hold, as New and a reload do: for --check-config.
func (c *Config) CheckPackages(install *runtimes.Install) error {
	if err := c.check(); err != nil {
		return err
	}
	return checkPackages(packages.Open(install.StateDir), c.derived.ceil)
}

// checkPackages refuses a ceiling whose packages are not in the store
// (a tenant's are among the global ceiling's, checked when it loaded).
func checkPackages(store *packages.Store, ceil job.Ceiling) error {
	for i, r := range ceil.Packages {
		if _, err := store.Get(r); err != nil {
			return fmt.Errorf("ceiling.packages[%d]: %w (pmjail packages add it first)", i, err)
		}
	}
	return nil
}

func (s *Server) newState(cfg *Config) (*state, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ceil, peers := cfg.derived.ceil, cfg.derived.peers
	// A Runner's ceiling is fixed for its life (the broker reads it), so a
	// new ceiling takes a new Runner, and each tenant has its own; the
	// runtimes, cgroups and pool are shared.
	var store *packages.Store
	if s.opt.Install != nil {
		store = packages.Open(s.opt.Install.StateDir)
		if err := checkPackages(store, ceil); err != nil {
			return nil, err
		}
	}
	runner := func(tenant string, ceil job.Ceiling) *job.Runner {
		return &job.Runner{
			Packages:     store,
			Install:      s.opt.Install,
			Cgroups:      s.opt.Cgroups,
			CgroupReason: s.opt.CgroupReason,
			Ceiling:      ceil,
			Logger:       s.log.With("tenant", tenant),
			Prober:       s.opt.Prober,
			Pool:         s.pool,
			Warm:         s.warm,
		}
	}
	st := &state{cfg: cfg, ceil: ceil, peers: peers}
	for _, r := range cfg.derived.tenants {
		st.tenants = append(st.tenants, &tenant{name: r.name, ceil: r.ceil, runner: runner(r.name, r.ceil), share: s.shareFor(r)})
	}
	if r := cfg.derived.others; r != nil {
		st.others = &tenant{name: othersName, ceil: ceil, runner: runner(othersName, ceil), share: s.shareFor(*r)}
	}
	return st, nil
}

// shareFor is the tenant's share: the one it had before a reload, or a
// new one with the rule's bounds.
func (s *Server) shareFor(r tenantRule) *share {
	s.sharesMu.Lock()
	defer s.sharesMu.Unlock()
	if sh := s.shares[r.name]; sh != nil {
		return sh
	}
	sh := &share{lim: newLimiter(r.max, r.queue), bucket: newBucket(r.rate)}
	sh.lim.freed = s.freed
	if s.shares == nil {
		s.shares = map[string]*share{}
	}
	s.shares[r.name] = sh
	return sh
}

// resizeShares gives the shares of st's tenants st's bounds and forgets
// those of tenants st no longer has once they hold no run: a share with
// runs in it or waiting keeps its bounds and is kept, so that a tenant a
// later reload gives back by name has it again, runs and all, and does
// not run its share's count again besides them (its waiting runs are
// refused as they get their slots while it is away: asRunNow).
func (s *Server) resizeShares(st *state) {
	s.sharesMu.Lock()
	defer s.sharesMu.Unlock()
	now := time.Now()
	kept := map[string]*share{}
	resize := func(r tenantRule, sh *share) {
		sh.lim.resize(r.max, r.queue)
		sh.bucket.set(r.rate, now)
		kept[r.name] = sh
	}
	for i, r := range st.cfg.derived.tenants {
		resize(r, st.tenants[i].share)
	}
	if r := st.cfg.derived.others; r != nil {
		resize(*r, st.others.share)
	}
	for name, sh := range s.shares {
		if _, ok := kept[name]; ok {
			continue
		}
		if running, queued, _, _ := sh.lim.stats(); running > 0 || queued > 0 {
			kept[name] = sh
		}
	}
	s.shares = kept
}

// load is the runs in flight and the runs waiting, in the global queue
// or a share's.
func (s *Server) load() (running, queued int) {
	running, queued, _, _ = s.lim.stats()
	s.sharesMu.Lock()
	defer s.sharesMu.Unlock()
	for _, sh := range s.shares {
		_, q, _, _ := sh.lim.stats()
		queued += q
	}
	return running, queued
}

// Reload applies a new config to the runs that start from now on: the
// ceiling, the allowed peers and the concurrency bounds. The socket's and
// the metrics listener's own settings take a restart.
func (s *Server) Reload(cfg *Config) error {
	return s.ReloadFrom(func() (*Config, error) { return cfg, nil })
}

// ReloadFrom reloads with the config load returns, as Reload does, and
// keeps the outcome, a failure to load included, for GET /v1/health and
// the reload failures counter.
func (s *Server) ReloadFrom(load func() (*Config, error)) error {
	cfg, err := load()
	if err == nil {
		err = s.reload(cfg)
	}
	outcome := &api.Reload{At: time.Now().UTC(), OK: err == nil}
	if err != nil {
		outcome.Error = err.Error()
		s.metrics.reloadFailures.Inc()
	}
	s.lastReload.Store(outcome)
	return err
}

func (s *Server) reload(cfg *Config) error {
	st, err := s.newState(cfg)
	if err != nil {
		return err
	}
	// Nothing can fail from here on: the new config is in force, and the
	// reload is reported done.
	old := s.state.Swap(st)
	if old.cfg.Socket != cfg.Socket {
		s.log.Warn("config reload: socket settings change only at restart")
	}
	if old.cfg.Metrics != cfg.Metrics {
		s.log.Warn("config reload: metrics settings change only at restart")
	}
	if old.cfg.WarmMaxAge != cfg.WarmMaxAge {
		s.log.Warn("config reload: warm_max_age changes only at restart")
	}
	if !reflect.DeepEqual(old.cfg.Queue, cfg.Queue) {
		s.log.Warn("config reload: queue settings change only at restart")
	}
	s.reloadRuns(old.cfg.Runs, cfg.Runs)
	s.lim.resize(cfg.MaxConcurrency, cfg.queueLen())
	s.bodies.resize(bodyCaps(cfg.MaxConcurrency))
	s.resizeShares(st)
	s.metrics.addTenants(st)
	s.pool.Resize(cfg.poolSize())
	if s.opt.Cgroups != nil {
		s.warm.Resize(cfg.Warm)
	}
	// A reload is also the operator's way to have the host probed again;
	// a probe that fails leaves the posture as it was, not the reload
	// undone.
	probed, err := s.opt.Prober.Refresh(context.Background(), time.Now())
	if err != nil {
		s.log.Warn("config reload: the host's probe failed; the posture is the last one", "err", err)
		probed = s.opt.Prober.Get(context.Background())
	}
	report := s.postureReport(probed)
	s.metrics.setPosture(report)
	s.log.Info("config reloaded", "max_concurrency", cfg.MaxConcurrency, "max_queue", cfg.queueLen(), "prestart", cfg.poolSize(),
		"tenants", len(st.tenants), "others", cfg.Others,
		"posture_decision", report.Decision, "refusing_for", report.Missing)
	return nil
}

// prewarm starts, in the background, the warm runtimes of the default
// profile, so that the first runs find them (others' ceiling, else the
// first tenant's, resolves it).
func (s *Server) prewarm(st *state) {
	if s.opt.Cgroups == nil {
		return
	}
	t := st.others
	if t == nil && len(st.tenants) > 0 {
		t = st.tenants[0]
	}
	if t == nil {
		return
	}
	go func() {
		for _, rt := range []string{"deno", "python"} {
			if err := t.runner.Prewarm(context.Background(), rt); err != nil {
				s.log.Warn("warm runtime", "runtime", rt, "err", err)
			}
		}
	}()
}

// warmHealth is /v1/health's account of the warm runtimes.
func warmHealth(st jail.WarmStats) *api.WarmHealth {
	return &api.WarmHealth{Idle: st.Idle, MemoryBytes: st.MemoryBytes, Memory: st.Memory}
}

// spareCore reports whether fewer runs are in flight than the host has
// cores: only then does starting an init stage ahead use a core that
// would otherwise idle.
func (s *Server) spareCore() bool {
	running, _, _, _ := s.lim.stats()
	return running < runtime.NumCPU()
}

// Config returns the config in force.
func (s *Server) Config() *Config { return s.state.Load().cfg }

// Serve answers requests on ln until Shutdown. ln must be a Unix socket:
// every connection's peer is checked by its credentials.
func (s *Server) Serve(ln net.Listener) error {
	if _, ok := ln.(*net.UnixListener); !ok {
		return fmt.Errorf("serve: %T is not a Unix socket listener", ln)
	}
	err := s.http.Serve(s.capSocket(ln))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// ServeMetrics answers GET /metrics, and nothing else, on ln (the
// config's metrics.listen) until Shutdown. No peer check guards it: what
// it shows is counts, and an operator who binds it beyond loopback has
// chosen who may read them.
func (s *Server) ServeMetrics(ln net.Listener) error {
	err := s.metricsHTTP.Serve(newConnCap(ln, metricsMaxConns, metricsMaxConnsPerPeer, s.log, s.connRefused))
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// metricsHandler is the metrics listener's routes: /metrics, and 404 for
// every other path, the API's included.
func (s *Server) metricsHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", s.only(http.MethodGet, s.metrics.handler.ServeHTTP))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+target(r)+" (this listener serves /metrics only)", "", 0)
	})
	return cleanPaths(mux)
}

// Shutdown stops taking requests and lets the runs in flight finish for up
// to grace; then it cancels them and waits for their results to be sent.
func (s *Server) Shutdown(grace time.Duration) error {
	s.shutdownMu.Lock()
	defer s.shutdownMu.Unlock()
	// The runs are over or cancelled when this runs: nothing takes from
	// the pool any more.
	defer s.pool.Close()
	defer s.warm.Close()
	defer s.opt.Prober.Close()
	// Scrapes are cut, not drained: they hold no run.
	defer s.metricsHTTP.Close()
	// A run answered before its jail's teardown still holds its jail and
	// its cgroup: nothing of it is left once Shutdown returns.
	defer s.teardowns.Wait()
	// The queue's runs end, within the same grace, before the pool closes.
	queueDone := s.stopQueue(grace)
	defer func() { <-queueDone }()
	s.draining.Store(true)
	running, queued, _, _ := s.lim.stats()
	s.log.Info("draining", "in_flight", running, "queued", queued, "grace", grace)
	if s.async != nil {
		// Queued async runs start no more; running ones have the grace
		// period, as a connection's do. The store closes after them.
		s.async.cancelQueued()
		defer s.async.close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), grace)
	defer cancel()
	err := s.http.Shutdown(ctx)
	if err == nil && s.async != nil {
		err = s.async.wait(ctx)
	}
	if err == nil {
		s.cancelRuns(errShutdown)
		return nil
	}
	running, queued, _, _ = s.lim.stats()
	s.log.Warn("grace period over: cancelling runs", "in_flight", running, "queued", queued)
	s.cancelRuns(errShutdown)
	ctx2, cancel2 := context.WithTimeout(context.Background(), drainCancelWait)
	defer cancel2()
	if err := s.http.Shutdown(ctx2); err != nil {
		_ = s.http.Close()
		return fmt.Errorf("shutdown: runs still busy after cancelling: %w", err)
	}
	if s.async != nil {
		if err := s.async.wait(ctx2); err != nil {
			return fmt.Errorf("shutdown: async runs still busy after cancelling: %w", err)
		}
	}
	return nil
}

// Handler is the API's routes behind the peer check.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/"+api.APIVersion+"/runs", s.only(http.MethodPost, s.handleRun))
	mux.HandleFunc("/"+api.APIVersion+"/runs/", s.handleRunByID)
	mux.HandleFunc("/"+api.APIVersion+"/batches", s.only(http.MethodPost, s.handleBatch))
	mux.HandleFunc("/"+api.APIVersion+"/posture", s.only(http.MethodGet, s.handlePosture))
	mux.HandleFunc("/"+api.APIVersion+"/health", s.only(http.MethodGet, s.handleHealth))
	mux.HandleFunc("/"+api.APIVersion+"/openapi.json", s.only(http.MethodGet, handleOpenAPI))
	mux.Handle("/metrics", s.only(http.MethodGet, s.ownUID(s.metrics.handler.ServeHTTP)))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+target(r), "", 0)
	})
	return s.authorise(cleanPaths(mux))
}

// cleanPaths answers, as the API answers, a request whose path no route
// takes as it is: one net/http's ServeMux would clean (an empty, "." or
// ".." segment) and answer with a redirect to the clean one (307, with
// an empty or HTML body, which a client posting a job follows or takes
// for its answer), or one with no path at all ("*", a CONNECT's
// host:port), which the mux answers in plain text or not at all. The
// API's paths are clean: such a request is 404, naming what it asked.
func cleanPaths(mux http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p := r.URL.Path
		if !strings.HasPrefix(p, "/") {
			writeError(w, http.StatusNotFound, codeNotFound, "no such endpoint: "+target(r)+" (the API's paths begin with /)", "", 0)
			return
		}
		if clean := path.Clean(p); clean != p && clean+"/" != p {
			writeError(w, http.StatusNotFound, codeNotFound,
				fmt.Sprintf("no such endpoint: %s (a path with an empty, . or .. segment is not cleaned: ask %s)", target(r), clean), "", 0)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// target is the request's path as the client sent it (escapes kept:
// "/v1%2fhealth" is not "/v1/health"), or its whole target where it
// has no path (a CONNECT's host:port).
func target(r *http.Request) string {
	if p := r.URL.EscapedPath(); p != "" {
		return p
	}
	return r.RequestURI
}

// ownUID lets only the daemon's own uid through: /metrics shows every
// tenant's name and counts, which no tenant may read of another.
func (s *Server) ownUID(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := peerFrom(r.Context())
		if self := uint32(os.Geteuid()); !p.self() {
			s.metrics.rejected.WithLabelValues(codeForbidden).Inc()
			writeError(w, http.StatusForbidden, codeForbidden,
				fmt.Sprintf("%s on the socket is for the daemon's own uid (%d) only: it shows every tenant's counts; uid %d may not read it", r.URL.Path, self, p.UID), "", 0)
			return
		}
		answerDeadline(w)
		h(w, r)
	}
}

// authorise refuses every request from a peer the config does not allow.
func (s *Server) authorise(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		boundUnreadBody(w, r)
		p := peerFrom(r.Context())
		// A peer a tenant names is allowed as if the allow list named it.
		st := s.state.Load()
		if t := st.tenantFor(p); !st.peers.allowed(p) && (t == nil || t == st.others) {
			s.metrics.rejected.WithLabelValues(codeForbidden).Inc()
			if ok, suppressed := s.refusals.allow(p.UID, time.Now()); ok {
				s.log.Warn("peer refused", "peer_pid", p.PID, "peer_uid", p.UID, "peer_gid", p.GID,
					"method", logtext.Clip(r.Method), "path", logtext.Clip(r.URL.Path), "err", p.Err, "suppressed", suppressed)
			}
			writeError(w, http.StatusForbidden, codeForbidden,
				fmt.Sprintf("uid %d is not allowed to use this pmjail daemon", p.UID), "", 0)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// unreadBodyTimeout bounds the read of a body no handler read: net/http
// reads up to 256 KiB of it to keep the connection, which at a body's
// minimum rate, after its grace, takes as long as this.
const unreadBodyTimeout = bodyGrace + (256<<10)*time.Second/bodyMinRate

// boundUnreadBody gives a request that declares a body a read deadline
// before any handler runs. net/http reads away what of a body the
// handler did not read, before the answer's head and again after the
// handler, with no deadline of its own: a peer that declared a body and
// sent none to an endpoint that reads none (a GET), or to a POST refused
// before it reads its body (the peer's own refusal included), had no
// answer, and its connection stayed active for ever, which held every
// shutdown for its grace and the cancel wait after, and failed it. Past
// the deadline the answer goes, and the connection is closed after it.
// A POST's handler reads its body under deadlines of its own (a
// pacedBody). Once a body is read whole, net/http clears the deadline
// for its read that watches for the client going; a request without a
// body is left alone, for the same read starts at once.
func boundUnreadBody(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		_ = http.NewResponseController(w).SetReadDeadline(time.Now().Add(unreadBodyTimeout))
	}
}

func (s *Server) only(method string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != method {
			w.Header().Set("Allow", method)
			writeError(w, http.StatusMethodNotAllowed, codeMethodNotAllowed, r.Method+" "+r.URL.Path+": use "+method, "", 0)
			return
		}
		h(w, r)
	}
}

func (s *Server) handleHealth(w http.ResponseWriter, req *http.Request) {
	peer := peerFrom(req.Context())
	h := api.Health{
		Status: "ok", Version: s.opt.Version, API: api.APIVersion,
		UptimeSeconds: time.Since(s.started).Seconds(), PID: os.Getpid(),
		LastReload: s.lastReload.Load(),
	}
	if peer.self() {
		// The operator's view: the daemon's counts and pools.
		_, _, max, queue := s.lim.stats()
		h.Scope = api.HealthScopeDaemon
		h.InFlight, h.Queued = s.load()
		h.MaxConcurrency, h.MaxQueue = max, queue
		h.Pooled, h.Warm = s.pool.Idle(), warmHealth(s.warm.Stats())
	} else {
		// Any other peer's: its tenant's share alone. The daemon's
		// counts, and its pools, which every tenant's runs take from
		// and refill, would tell it when the others run.
		h.Scope = api.HealthScopeTenant
		if tn := s.state.Load().tenantFor(peer); tn != nil {
			h.Tenant = tn.name
			h.InFlight, h.Queued, h.MaxConcurrency, h.MaxQueue = tn.share.lim.stats()
		}
	}
	// A refused reload's error names config paths, secret files and
	// uids: the daemon's own uid reads it, others the outcome only.
	if r := h.LastReload; r != nil && r.Error != "" && !peer.self() {
		redacted := *r
		redacted.Error = ""
		h.LastReload = &redacted
	}
	if s.draining.Load() {
		writeError(w, http.StatusServiceUnavailable, codeDraining, "the daemon is shutting down", "", 0)
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// handleOpenAPI serves the API's OpenAPI document as built in. Its type is
// plain application/json: what generators, Swagger UI and curl expect (the
// OpenAPI media type, application/vnd.oai.openapi+json, few clients ask for).
func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	answerDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(api.OpenAPI)))
	_, _ = w.Write(api.OpenAPI)
}

func (s *Server) handlePosture(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("refresh") != "" {
		s.refreshPosture(w, r)
		return
	}
	writeJSON(w, http.StatusOK, s.postureReport(s.opt.Prober.Get(r.Context())))
}

// refreshPosture probes the host again for GET /v1/posture?refresh=1. A
// probe starts a jail and a few throwaway children, so only the daemon's
// own uid may ask for one, and it takes a run slot as a run does. The
// probe itself is the Prober's, detached from this request: a client that
// hangs up stops waiting, not the probe, and its slot is held until the
// probe ends.
func (s *Server) refreshPosture(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	peer := peerFrom(r.Context())
	log := s.log.With("peer_pid", peer.PID, "peer_uid", peer.UID)
	reject := func(status int, code, msg string, retry time.Duration) {
		s.metrics.rejected.WithLabelValues(code).Inc()
		log.Info("posture refresh rejected", "code", code, "detail", msg)
		writeError(w, status, code, msg, "refresh", retry)
	}
	if self := uint32(os.Geteuid()); peer.UID != self {
		reject(http.StatusForbidden, codeRefreshForbidden,
			fmt.Sprintf("only the daemon's own uid (%d) may have the host probed again; uid %d may read the posture without refresh", self, peer.UID), 0)
		return
	}
	if s.draining.Load() {
		reject(http.StatusServiceUnavailable, codeDraining, "the daemon is shutting down", 5*time.Second)
		return
	}
	st := s.state.Load()
	qctx, cancelQueue := context.WithTimeout(r.Context(), time.Duration(st.cfg.QueueTimeout))
	release, err := s.lim.acquire(qctx)
	cancelQueue()
	switch {
	case errors.Is(err, errQueueFull):
		reject(http.StatusTooManyRequests, codeQueueFull, "every run slot and queue place is taken", time.Second)
		return
	case err != nil && errors.Is(context.Cause(r.Context()), errShutdown):
		// The client is there: the shutdown ended its wait, not it.
		reject(http.StatusServiceUnavailable, codeDraining, "the daemon shut down before the probe had a slot", 5*time.Second)
		return
	case err != nil && r.Context().Err() != nil:
		log.Info("client gone while a posture refresh was queued")
		return
	case err != nil:
		reject(http.StatusServiceUnavailable, codeQueueTimeout,
			fmt.Sprintf("no run slot freed within %v", time.Duration(st.cfg.QueueTimeout)), 5*time.Second)
		return
	}
	probed, err := s.opt.Prober.Refresh(r.Context(), arrived)
	if err != nil {
		idle := s.opt.Prober.Idle()
		go func() { <-idle; release() }()
		if errors.Is(context.Cause(r.Context()), errShutdown) {
			// The client is there: the end of the grace period cut its
			// wait, and a handler that returns without a word is a
			// bodiless 200.
			reject(http.StatusServiceUnavailable, codeDraining, "the daemon shut down during the probe", 5*time.Second)
			return
		}
		log.Info("client gone during a posture refresh; the probe goes on", "err", err)
		return
	}
	release()
	report := s.postureReport(probed)
	s.metrics.setPosture(report)
	writeJSON(w, http.StatusOK, report)
}

// postureReport is the host's posture in the mode the current config sets.
func (s *Server) postureReport(probed *posture.Probed) *posture.Report {
	ceil := s.state.Load().ceil
	mode := ceil.Mode
	if mode == "" {
		mode = job.ModeAuto
	}
	return probed.Report(mode, ceil.Required)
}

func wantsStream(r *http.Request) bool {
	for _, v := range r.Header.Values("Accept") {
		if strings.Contains(v, api.NDJSON) {
			return true
		}
	}
	return false
}
