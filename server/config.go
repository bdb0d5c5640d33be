package server

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/netip"
	"os"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/pmjail/pmjail/client"
	"github.com/pmjail/pmjail/internal/capread"
	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/packages"
	"github.com/pmjail/pmjail/posture"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
)

// ConfigVersion is the config schema this daemon reads.
const ConfigVersion = 1

// maxConfigBytes caps the config file.
const maxConfigBytes = 1 << 20

// Config is the operator's config file (JSON, schema in API.md). Unknown
// fields are refused. Zero values take the defaults of Defaults.
type Config struct {
	Version int          `json:"version"`
	Socket  SocketConfig `json:"socket"`
	Allow   Allow        `json:"allow"`
	// MaxConcurrency bounds the runs at once (default: the number of CPUs).
	MaxConcurrency int `json:"max_concurrency"`
	// MaxQueue bounds the runs waiting for a slot (default 2×MaxConcurrency;
	// -1 means no queue). Beyond it a run is refused with 429.
	MaxQueue int `json:"max_queue"`
	// Pool is how many init stages the daemon keeps started ahead of runs
	// (default MaxConcurrency; -1 means none): a run that takes one skips
	// the clone, exec and start-up of its own (see jail.Pool). Its key,
	// "prestart", is the operators'.
	Pool int `json:"prestart"`
	// Warm is how many runtimes the daemon keeps started ahead of runs,
	// per runtime ("deno", "python") and per profile and options set,
	// each waiting in its whole jail for a job (see jail.Warm). Default,
	// for each runtime left out: deno as many as MaxConcurrency (at most
	// MaxWarm), python 0; 0 turns one off.
	Warm map[string]int `json:"warm"`
	// WarmMaxAge is how long a warm runtime waits before it is recycled
	// (default 10m).
	WarmMaxAge profiles.Duration `json:"warm_max_age"`
	// QueueTimeout bounds the wait for a slot (default 60s; then 503).
	QueueTimeout profiles.Duration `json:"queue_timeout"`
	// ShutdownGrace is how long SIGTERM lets in-flight runs finish before
	// cancelling them (default 30s).
	ShutdownGrace profiles.Duration `json:"shutdown_grace"`
	// LogLevel is debug, info, warn or error (default info).
	LogLevel string `json:"log_level"`
	// Ceiling bounds every job, and every tenant's ceiling.
	Ceiling CeilingConfig `json:"ceiling"`
	// Tenants share the daemon: each peer runs under its tenant's ceiling,
	// share and rate (TenantConfig).
	Tenants []TenantConfig `json:"tenants"`
	// Others says what a peer that matches no tenant gets: "allow" runs
	// it under the global ceiling, "refuse" answers 403. Default: allow
	// when there are no tenants, refuse when there are.
	Others string `json:"others"`
	// OthersMaxConcurrency, OthersMaxQueue and OthersRate are the share
	// and rate of the peers that match no tenant, as a tenant's
	// max_concurrency, max_queue and rate. Left out, others get an even
	// part of the slots the tenants' shares leave (all of them without
	// tenants); every share, others' included, fits in MaxConcurrency.
	OthersMaxConcurrency int    `json:"others_max_concurrency"`
	OthersMaxQueue       int    `json:"others_max_queue"`
	OthersRate           string `json:"others_rate"`
	// Metrics is where /metrics is served besides the socket.
	Metrics MetricsConfig `json:"metrics"`
	// Runs is the store of async runs (RunsConfig).
	Runs RunsConfig `json:"runs"`
	// Queue is where the daemon takes jobs besides its socket (queue.go).
	Queue QueueConfig `json:"queue"`

	// derived is what normalize worked out from Ceiling and Allow, kept so
	// that the server applies exactly what was checked: each secret's
	// value_file is read once, and nothing is derived again at New or
	// Reload. Set by LoadConfig and ParseConfig; change Ceiling or Allow
	// of a loaded Config and the change is not seen.
	derived *derivedConfig
}

// derivedConfig is the checked form of a config's ceiling and allow list.
type derivedConfig struct {
	ceil    job.Ceiling
	peers   peerSet
	tenants []tenantRule
	// others is the share of the peers of no tenant; nil when refused.
	others *tenantRule
}

// SocketConfig is where the daemon listens when systemd does not hand it a
// socket. Changing it takes a restart.
type SocketConfig struct {
	Path  string `json:"path"`  // default /run/pmjail/pmjail.sock
	Owner string `json:"owner"` // user name or uid; default the daemon's
	Group string `json:"group"` // group name or gid; default the daemon's
	Mode  string `json:"mode"`  // octal; default "0660"
	// MaxConns bounds the socket's open connections, and MaxConnsPerUID
	// those of one peer uid; beyond, a connection is closed as accepted.
	// Default: from the daemon's RLIMIT_NOFILE (defaultConnCaps).
	MaxConns       int `json:"max_connections"`
	MaxConnsPerUID int `json:"max_connections_per_uid"`
}

// MetricsConfig is the optional TCP listener for /metrics, for a
// Prometheus that cannot reach the Unix socket. Changing it takes a
// restart.
type MetricsConfig struct {
	// Listen is a host:port ("127.0.0.1:9464"); empty, there is no
	// listener. It serves /metrics and nothing else, to anyone who can
	// connect (on loopback, every local user): the posture layers a host
	// lacks, the build and the tenants' names and counts.
	Listen string `json:"listen"`
	// Public lets Listen name a host other than a loopback address or
	// "localhost" (":9464", "0.0.0.0:9464", a network address): the
	// operator says the network it reaches is only scrapers'.
	Public bool `json:"public"`
}

// check refuses a listen address net.Listen would not take as a TCP
// host:port with an explicit port, and one beyond loopback unless Public.
func (m MetricsConfig) check() error {
	if m.Listen == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(m.Listen)
	if err != nil {
		return fmt.Errorf("metrics.listen: %q: want host:port, such as \"127.0.0.1:9464\"", m.Listen)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("metrics.listen: %q: port %q is not a number from 0 to 65535", m.Listen, port)
	}
	ip, err := netip.ParseAddr(host)
	loopback := host == "localhost" || (err == nil && ip.IsLoopback())
	if !loopback && !m.Public {
		return fmt.Errorf("metrics.listen: %q is not a loopback address, and the listener has no peer check: bind 127.0.0.1 or [::1], or set metrics.public to true if only scrapers reach that network", m.Listen)
	}
	return nil
}

// RunsConfig is the store of async runs (POST /v1/runs with Prefer:
// respond-async, POST /v1/batches). Changing Dir takes a restart; the
// rest applies at a reload.
type RunsConfig struct {
	// Dir holds the store's file (runstore.FileName). Default: the
	// daemon's $PMJAIL_STATE_DIR (/var/lib/pmjail under the systemd
	// unit); with neither, the daemon takes no async runs.
	Dir string `json:"dir"`
	// Retention is how long a finished run is kept (default 24h).
	Retention profiles.Duration `json:"retention"`
	// MaxBytes caps the finished runs' results and events together; over
	// it the oldest run of the owner that keeps the most bytes goes first
	// (default 256M).
	MaxBytes profiles.Size `json:"max_bytes"`
	// MaxBatch bounds the jobs of one POST /v1/batches (default 100).
	MaxBatch int `json:"max_batch"`
}

// Defaults of RunsConfig, and the largest batch a config may allow.
const (
	DefaultRunsRetention = 24 * time.Hour
	DefaultRunsMaxBytes  = 256 << 20
	DefaultMaxBatch      = 100
	MaxBatchLimit        = 1000
)

// The refusals of a runs section, for errors.Is.
var (
	ErrRunsRetention = errors.New("runs.retention must be above 0")
	ErrRunsMaxBytes  = errors.New("runs.max_bytes must be above 0")
	ErrRunsMaxBatch  = errors.New("runs.max_batch out of range")
	ErrRunsDir       = errors.New("runs.dir must be an absolute path")
)

// check refuses bad bounds and fills in the defaults.
func (r *RunsConfig) check() error {
	if r.Dir != "" && !filepath.IsAbs(r.Dir) {
		return fmt.Errorf("%w: %q", ErrRunsDir, r.Dir)
	}
	switch {
	case r.Retention < 0:
		return fmt.Errorf("%w: %v", ErrRunsRetention, time.Duration(r.Retention))
	case r.Retention == 0:
		r.Retention = profiles.Duration(DefaultRunsRetention)
	}
	switch {
	case r.MaxBytes < 0:
		return fmt.Errorf("%w: %d", ErrRunsMaxBytes, r.MaxBytes)
	case r.MaxBytes == 0:
		r.MaxBytes = DefaultRunsMaxBytes
	}
	switch {
	case r.MaxBatch < 0 || r.MaxBatch > MaxBatchLimit:
		return fmt.Errorf("%w: %d (want 1 to %d)", ErrRunsMaxBatch, r.MaxBatch, MaxBatchLimit)
	case r.MaxBatch == 0:
		r.MaxBatch = DefaultMaxBatch
	}
	return nil
}

// Allow lists the peers that may use the API, matched by SO_PEERCRED: a
// peer is allowed when its uid is listed, or its primary or one of its
// supplementary groups is. The daemon's own uid is always allowed.
type Allow struct {
	UIDs   []uint32 `json:"uids"`
	GIDs   []uint32 `json:"gids"`
	Users  []string `json:"users"`
	Groups []string `json:"groups"`
}

// CeilingConfig is what no job may exceed.
type CeilingConfig struct {
	// Limits caps each limit (default: memory 1G, cpu_time 60s, timeout 5m,
	// pids 256, output 16M, tmp 256M).
	Limits profiles.Limits `json:"limits"`
	// Runtimes enabled (default: deno and python).
	Runtimes []string `json:"runtimes"`
	// Profiles a job may name (default: every built-in one); a job that
	// names none runs under "default" if listed, else the first.
	Profiles []string `json:"profiles"`
	// Mode "required" forces every run into mode required; "auto" (the
	// default) lets the job choose.
	Mode string `json:"mode"`
	// Required adds layers that mode required insists on.
	Required []string `json:"required"`
	// Capabilities is a pointer so that a tenant's ceiling can tell a
	// block left out (the global one's) from an empty one (none).
	Capabilities *CapabilitiesConfig `json:"capabilities"`
	// Secrets the broker may inject into requests, by name.
	Secrets map[string]SecretConfig `json:"secrets"`
	// Packages a job may import, from the package store (`pmjail
	// packages add`): npm:NAME@X.Y.Z or py:NAME@VERSION (default: none).
	Packages []string `json:"packages"`
}

// CapabilitiesConfig says which capabilities a job may declare.
type CapabilitiesConfig struct {
	// Log allows the log capability (default true).
	Log *bool `json:"log"`
	// Request allows the request capability; absent, it is refused.
	Request *RequestCeiling `json:"request"`
}

// RequestCeiling bounds the request capability.
type RequestCeiling struct {
	// Origins a job may declare; ["*"] allows any. Required.
	Origins []string `json:"origins"`
	// Methods a job may declare (default: any).
	Methods []string `json:"methods"`
	// AllowPrivateAddresses lets every origin reach private, link-local and
	// metadata addresses.
	AllowPrivateAddresses bool `json:"allow_private_addresses"`
	// PrivateOrigins are the origins that may reach a private (loopback,
	// RFC 1918, ULA, IPv6 link-local, CGNAT) address without
	// AllowPrivateAddresses, each named exactly; a job may declare them.
	PrivateOrigins   []string          `json:"private_origins"`
	MaxResponseBytes profiles.Size     `json:"max_response_bytes"`
	Timeout          profiles.Duration `json:"timeout"`
	MaxCalls         int               `json:"max_calls"`
	MaxInFlight      int               `json:"max_in_flight"`
}

// SecretConfig is one named secret: its value inline or in a file.
type SecretConfig struct {
	Header    string `json:"header"` // default Authorization
	Value     string `json:"value"`
	ValueFile string `json:"value_file"`
	// Origins the secret may be sent to (required).
	Origins []string `json:"origins"`
}

// Defaults for the config.
const (
	DefaultSocketPath    = client.DefaultSocketPath
	DefaultSocketMode    = 0o660
	DefaultQueueTimeout  = 60 * time.Second
	DefaultShutdownGrace = 30 * time.Second
)

// DefaultLimits is the ceiling's limits when the config sets none.
func DefaultLimits() profiles.Limits {
	return profiles.Limits{
		Memory:  1 << 30,
		CPUTime: profiles.Duration(time.Minute),
		Timeout: profiles.Duration(5 * time.Minute),
		Pids:    256,
		Output:  16 << 20,
		Tmp:     256 << 20,
	}
}

// LoadConfig reads and validates a config file; "" gives the defaults.
func LoadConfig(path string) (*Config, error) {
	if path == "" {
		c := &Config{Version: ConfigVersion}
		return c, c.normalize()
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	defer f.Close()
	c, err := ParseConfig(f)
	if err != nil {
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes and validates a config, filling in the defaults.
func ParseConfig(r io.Reader) (*Config, error) {
	data, err := capread.Reader(r, "the config", maxConfigBytes)
	if err != nil {
		return nil, err
	}
	var c Config
	if err := strictjson.Decode(data, &c); err != nil {
		return nil, strictjson.Headed(err, "malformed JSON")
	}
	if err := c.normalize(); err != nil {
		return nil, err
	}
	return &c, nil
}

// normalize checks the config and fills in its defaults.
func (c *Config) normalize() error {
	switch c.Version {
	case ConfigVersion:
	case 0:
		// A config without the key reads as version 0, which no config
		// ever had: say what is missing, not that 0 is unknown.
		return fmt.Errorf("version: missing (want %d, the config schema this pmjail reads)", ConfigVersion)
	default:
		return fmt.Errorf("version: %d (this pmjail reads version %d)", c.Version, ConfigVersion)
	}
	if c.Socket.Path == "" {
		c.Socket.Path = DefaultSocketPath
	}
	if c.Socket.Mode == "" {
		c.Socket.Mode = "0" + strconv.FormatUint(DefaultSocketMode, 8)
	}
	if _, err := c.Socket.FileMode(); err != nil {
		return err
	}
	if _, _, err := c.Socket.Owners(); err != nil {
		return err
	}
	if err := c.Socket.connCaps(); err != nil {
		return err
	}
	if err := c.Metrics.check(); err != nil {
		return err
	}
	if err := c.Runs.check(); err != nil {
		return err
	}
	if c.MaxConcurrency < 0 {
		return fmt.Errorf("max_concurrency: %d is below 0", c.MaxConcurrency)
	}
	if c.MaxConcurrency > jail.MaxJobs {
		return fmt.Errorf("max_concurrency: %d is over the %d runs a host can hold at once (one job id slot each)", c.MaxConcurrency, jail.MaxJobs)
	}
	if c.MaxConcurrency == 0 {
		c.MaxConcurrency = runtime.NumCPU()
	}
	switch {
	case c.MaxQueue < -1:
		return fmt.Errorf("max_queue: %d (want -1 for none, or a count)", c.MaxQueue)
	case c.MaxQueue > MaxQueueLimit:
		return fmt.Errorf("max_queue: %d is over the %d runs this daemon queues at most (each queued async run holds its job, up to %d bytes, in memory)",
			c.MaxQueue, MaxQueueLimit, job.MaxRequestBytes)
	case c.MaxQueue == 0:
		c.MaxQueue = min(2*c.MaxConcurrency, MaxQueueLimit)
	}
	switch {
	case c.Pool < -1:
		return fmt.Errorf("prestart: %d (want -1 for none, or a count)", c.Pool)
	case c.Pool > MaxPool:
		return fmt.Errorf("prestart: %d is over the %d this daemon keeps at most", c.Pool, MaxPool)
	case c.Pool == 0:
		c.Pool = min(c.MaxConcurrency, MaxPool)
	}
	if err := c.normalizeWarm(); err != nil {
		return err
	}
	if err := c.checkSlots(); err != nil {
		return err
	}
	if c.Queue.NATS != nil {
		if err := c.Queue.NATS.Check(c.MaxConcurrency); err != nil {
			return err
		}
	}
	if c.QueueTimeout == 0 {
		c.QueueTimeout = profiles.Duration(DefaultQueueTimeout)
	}
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = profiles.Duration(DefaultShutdownGrace)
	}
	if c.LogLevel == "" {
		c.LogLevel = "info"
	}
	if _, err := c.Level(); err != nil {
		return err
	}
	peers, err := c.Allow.resolve()
	if err != nil {
		return err
	}
	ceil, err := c.Ceiling.JobCeiling()
	if err != nil {
		return err
	}
	// A run's output is stored twice, in its result and its events: a
	// store that cannot keep one run writing the ceiling's output on
	// one stream drops its result as it ends.
	if out := int64(ceil.Limits.Output); int64(c.Runs.MaxBytes) < 2*out {
		return fmt.Errorf("runs.max_bytes: %d is below twice ceiling.limits.output (%d): a run's output is kept twice (its result and its events), and one over the cap alone is not kept; raise it to %d or more, well above on both streams",
			int64(c.Runs.MaxBytes), out, 2*out)
	}
	tenants, others, err := c.tenantRules(ceil)
	if err != nil {
		return err
	}
	c.derived = &derivedConfig{ceil: ceil, peers: peers, tenants: tenants, others: others}
	return nil
}

// check normalizes a Config built in code, not loaded, as loading does:
// it is checked and its defaults filled in once.
func (c *Config) check() error {
	if c.derived != nil {
		return nil
	}
	return c.normalize()
}

// MaxQueueLimit bounds MaxQueue, and so each share's queue. A sync run
// waiting holds a connection, which the socket's caps bound; an async
// run waits without one, holding its job (up to job.MaxRequestBytes,
// decoded), its record and a goroutine, and a tenant may have as many
// waiting as its share's queue: the bound keeps a typo of a few orders
// of magnitude from letting one peer fill the daemon's memory.
const MaxQueueLimit = 4096

// MaxPool bounds Pool: each pooled init stage holds a few MiB and
// a set of namespaces while it waits.
const MaxPool = 64

// MaxWarm bounds each of Warm's counts: a waiting Deno holds tens of
// MiB, a Pyodide over a hundred.
const MaxWarm = 64

// DefaultWarmMaxAge is WarmMaxAge's default.
const DefaultWarmMaxAge = 10 * time.Minute

// normalizeWarm checks Warm and fills in its defaults.
func (c *Config) normalizeWarm() error {
	// Each runtime left out keeps its default, so that a config that
	// names only python ({"python": 1}) keeps its warm Denos; only an
	// explicit 0 turns one off.
	if c.Warm == nil {
		c.Warm = map[string]int{}
	}
	if _, ok := c.Warm["deno"]; !ok {
		c.Warm["deno"] = min(c.MaxConcurrency, MaxWarm)
	}
	for _, k := range slices.Sorted(maps.Keys(c.Warm)) {
		n := c.Warm[k]
		switch {
		case k != "deno" && k != "python":
			return fmt.Errorf("warm.%s: not a runtime (want deno or python)", k)
		case n < 0:
			return fmt.Errorf("warm.%s: %d is below 0 (0 turns it off)", k, n)
		case n > MaxWarm:
			return fmt.Errorf("warm.%s: %d is over the %d this daemon keeps at most", k, n, MaxWarm)
		}
	}
	switch {
	case c.WarmMaxAge < 0:
		return fmt.Errorf("warm_max_age: %v is below 0", time.Duration(c.WarmMaxAge))
	case c.WarmMaxAge == 0:
		c.WarmMaxAge = profiles.Duration(DefaultWarmMaxAge)
	}
	return nil
}

// checkSlots refuses a config whose runs, prestarted init stages and
// warm runtimes could together need more job id slots than a host has
// (jail.MaxJobs): each holds one from its start, and a run that finds
// none free fails. The pool keeps prestart init stages for the one set
// of namespaces the host's probe gives every run; the warm pool keeps,
// for each of up to jail.DefaultWarmTemplates templates, its runtime's
// count.
func (c *Config) checkSlots() error {
	warm := 0
	for _, n := range c.Warm {
		warm = max(warm, n)
	}
	warm *= jail.DefaultWarmTemplates
	if need := c.MaxConcurrency + c.poolSize() + warm; need > jail.MaxJobs {
		return fmt.Errorf("max_concurrency, prestart, warm: %d runs, %d prestarted init stages and up to %d warm runtimes (%d templates of %d) need %d job id slots, over the %d a host has: lower max_concurrency to %d, or prestart or warm",
			c.MaxConcurrency, c.poolSize(), warm, jail.DefaultWarmTemplates, warm/jail.DefaultWarmTemplates, need, jail.MaxJobs, max(0, jail.MaxJobs-c.poolSize()-warm))
	}
	return nil
}

// poolSize is the pool size as jail.Pool takes it.
func (c *Config) poolSize() int {
	if c.Pool < 0 {
		return 0
	}
	return c.Pool
}

// queueLen is the queue bound as the limiter takes it.
func (c *Config) queueLen() int {
	if c.MaxQueue < 0 {
		return 0
	}
	return c.MaxQueue
}

// connCaps checks the connection caps and fills in their defaults.
func (s *SocketConfig) connCaps() error {
	if s.MaxConns < 0 || s.MaxConnsPerUID < 0 {
		return fmt.Errorf("socket.max_connections, socket.max_connections_per_uid: want counts, or 0 for the defaults")
	}
	// Each connection holds a file descriptor: a cap above the limit
	// never applies (accept fails first, and runs find none free).
	limit := nofile()
	for _, c := range []struct {
		key string
		n   int
	}{{"socket.max_connections", s.MaxConns}, {"socket.max_connections_per_uid", s.MaxConnsPerUID}} {
		if c.n > limit {
			return fmt.Errorf("%s: %d is over the daemon's RLIMIT_NOFILE of %d (each connection holds a file descriptor, and the runs need theirs): keep it under half of it, or raise LimitNOFILE",
				c.key, c.n, limit)
		}
	}
	total, perUID := defaultConnCaps()
	if s.MaxConns == 0 {
		s.MaxConns = total
	}
	if s.MaxConnsPerUID == 0 {
		s.MaxConnsPerUID = min(perUID, s.MaxConns)
	}
	return nil
}

// FileMode parses the socket's mode.
func (s SocketConfig) FileMode() (os.FileMode, error) {
	m, err := strconv.ParseUint(s.Mode, 8, 32)
	if err != nil || m > 0o777 {
		return 0, fmt.Errorf("socket.mode: %q is not an octal permission such as \"0660\"", s.Mode)
	}
	return os.FileMode(m), nil
}

// Owners resolves the socket's owner and group; -1 keeps the daemon's.
func (s SocketConfig) Owners() (uid, gid int, err error) {
	uid, gid = -1, -1
	if s.Owner != "" {
		if uid, err = lookupID(s.Owner, true); err != nil {
			return 0, 0, fmt.Errorf("socket.owner: %w", err)
		}
	}
	if s.Group != "" {
		if gid, err = lookupID(s.Group, false); err != nil {
			return 0, 0, fmt.Errorf("socket.group: %w", err)
		}
	}
	return uid, gid, nil
}

// lookupID takes a number as it is and resolves a name.
func lookupID(name string, isUser bool) (int, error) {
	if n, err := strconv.ParseUint(name, 10, 32); err == nil {
		return int(n), nil
	}
	var id string
	// os/user's own words repeat the field's ("user: unknown user x").
	if isUser {
		u, err := user.Lookup(name)
		if _, ok := errors.AsType[user.UnknownUserError](err); ok {
			return 0, fmt.Errorf("unknown user %q", name)
		}
		if err != nil {
			return 0, err
		}
		id = u.Uid
	} else {
		g, err := user.LookupGroup(name)
		if _, ok := errors.AsType[user.UnknownGroupError](err); ok {
			return 0, fmt.Errorf("unknown group %q", name)
		}
		if err != nil {
			return 0, err
		}
		id = g.Gid
	}
	n, err := strconv.ParseUint(id, 10, 32)
	if err != nil {
		return 0, fmt.Errorf("%s: non-numeric id %q", name, id)
	}
	return int(n), nil
}

// peerSet is the resolved allow list.
type peerSet struct {
	uids, gids map[uint32]bool
}

func (a Allow) resolve() (peerSet, error) {
	p := peerSet{uids: map[uint32]bool{uint32(os.Geteuid()): true}, gids: map[uint32]bool{}}
	for _, u := range a.UIDs {
		p.uids[u] = true
	}
	for _, g := range a.GIDs {
		p.gids[g] = true
	}
	for i, name := range a.Users {
		id, err := lookupID(name, true)
		if err != nil {
			return p, fmt.Errorf("allow.users[%d]: %w", i, err)
		}
		p.uids[uint32(id)] = true
	}
	for i, name := range a.Groups {
		id, err := lookupID(name, false)
		if err != nil {
			return p, fmt.Errorf("allow.groups[%d]: %w", i, err)
		}
		p.gids[uint32(id)] = true
	}
	return p, nil
}

// JobCeiling maps the ceiling onto the job package's, checking it.
func (cc CeilingConfig) JobCeiling() (job.Ceiling, error) {
	var ceil job.Ceiling
	ceil.Limits = cc.Limits.Merge(DefaultLimits())
	if err := ceil.Limits.Validate(); err != nil {
		return ceil, fmt.Errorf("ceiling.%w", err)
	}
	rts := cc.Runtimes
	if rts == nil {
		rts = []string{string(runtimes.Deno), string(runtimes.Python)}
	}
	if len(rts) == 0 {
		// No runtime at all would refuse every job of the ceiling.
		return ceil, errors.New("ceiling.runtimes: list at least one runtime, or leave it out for deno and python")
	}
	ceil.Runtimes = []runtimes.Name{}
	for i, s := range rts {
		n, err := runtimes.ParseName(strings.ToLower(s)) // the operator's file: any case
		if err != nil {
			return ceil, fmt.Errorf("ceiling.runtimes[%d]: %w", i, err)
		}
		ceil.Runtimes = append(ceil.Runtimes, n)
	}
	if cc.Profiles != nil && len(cc.Profiles) == 0 {
		// No profile at all would leave a job that names none under
		// "default", the one profile the operator did not list.
		return ceil, errors.New("ceiling.profiles: list at least one profile, or leave it out for every built-in one")
	}
	for i, p := range cc.Profiles {
		if strings.ContainsAny(p, "/.") {
			return ceil, fmt.Errorf("ceiling.profiles[%d]: %q: name a built-in profile", i, p)
		}
		if _, err := profiles.Load(p); err != nil {
			return ceil, fmt.Errorf("ceiling.profiles[%d]: %w", i, err)
		}
	}
	ceil.Profiles = cc.Profiles
	switch cc.Mode {
	case "", job.ModeAuto, job.ModeRequired:
		ceil.Mode = cc.Mode
	default:
		return ceil, fmt.Errorf("ceiling.mode: %q (want auto or required)", cc.Mode)
	}
	if err := checkLayers("ceiling.required", cc.Required); err != nil {
		return ceil, err
	}
	ceil.Required = cc.Required
	pkgs, err := packages.ParseRefs(cc.Packages)
	if err != nil {
		return ceil, fmt.Errorf("ceiling.packages%w", err)
	}
	ceil.Packages = pkgs

	var caps CapabilitiesConfig
	if cc.Capabilities != nil {
		caps = *cc.Capabilities
	}
	b := ipc.Ceiling{AllowLog: caps.Log == nil || *caps.Log}
	if r := caps.Request; r != nil {
		b.AllowRequest = true
		switch {
		case len(r.Origins) == 0:
			return ceil, fmt.Errorf(`ceiling.capabilities.request.origins: empty (list origins, or ["*"] for any)`)
		case slices.Contains(r.Origins, "*"):
			if len(r.Origins) > 1 {
				return ceil, fmt.Errorf(`ceiling.capabilities.request.origins: "*" must stand alone`)
			}
		default:
			// Checked here, where the path to them is known: the broker's
			// own check would name them as its fields (ceiling.origins[0]).
			for i, o := range r.Origins {
				if _, err := ipc.NormalizeOrigin(o); err != nil {
					return ceil, fmt.Errorf("ceiling.capabilities.request.origins[%d]: %w", i, err)
				}
			}
			b.Origins = r.Origins
		}
		for i, m := range r.Methods {
			if !slices.Contains(ipc.AllMethods, m) {
				return ceil, fmt.Errorf("ceiling.capabilities.request.methods[%d]: %q is not one of %s", i, m, strings.Join(ipc.AllMethods, " "))
			}
		}
		b.Methods = r.Methods
		b.AllowPrivateAddresses = r.AllowPrivateAddresses
		for i, o := range r.PrivateOrigins {
			if _, err := ipc.NormalizeOrigin(o); err != nil {
				return ceil, fmt.Errorf("ceiling.capabilities.request.private_origins[%d]: %w", i, err)
			}
		}
		b.PrivateOrigins = r.PrivateOrigins
		b.MaxResponseBytes = int64(r.MaxResponseBytes)
		b.RequestTimeout = time.Duration(r.Timeout)
		b.MaxCalls = r.MaxCalls
		b.MaxInFlight = r.MaxInFlight
	}
	if len(cc.Secrets) > 0 {
		b.Secrets = map[string]ipc.Secret{}
	}
	for name, s := range cc.Secrets {
		v := s.Value
		switch {
		case s.Value != "" && s.ValueFile != "":
			return ceil, fmt.Errorf("ceiling.secrets[%q]: set value or value_file, not both", name)
		case s.ValueFile != "":
			data, err := os.ReadFile(s.ValueFile)
			if err != nil {
				return ceil, fmt.Errorf("ceiling.secrets[%q].value_file: %w", name, err)
			}
			v = strings.TrimRight(string(data), "\r\n")
		}
		b.Secrets[name] = ipc.Secret{Header: s.Header, Value: v, Origins: s.Origins}
	}
	b, err = b.Prepare()
	if err != nil {
		return ceil, err
	}
	ceil.Broker = b
	return ceil, nil
}

// checkLayers refuses a layer name that is not one of the posture's: mode
// required would insist on a layer no host can apply, and refuse every run
// for a typo.
func checkLayers(at string, layers []string) error {
	for i, l := range layers {
		if !slices.Contains(posture.Names, l) {
			return fmt.Errorf("%s[%d]: unknown layer %q (layers: %s)", at, i, l, strings.Join(posture.Names, ", "))
		}
	}
	return nil
}
