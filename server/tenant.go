package server

import (
	"errors"
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pmjail/pmjail/job"
)

// TenantConfig is one tenant of a shared daemon: the peers it matches, its
// own ceiling, its share of the run slots and queue, and its rate.
type TenantConfig struct {
	// Name labels the tenant's logs and metrics: lower-case letters,
	// digits, '-' and '_'; unique; "others" is the peers that match no
	// tenant.
	Name  string      `json:"name"`
	Match TenantMatch `json:"match"`
	// Ceiling bounds the tenant's jobs. What it leaves out is the global
	// ceiling's; what it sets must lie within the global ceiling (the
	// config is refused otherwise, naming the field). Limits merge limit
	// by limit; capabilities, when set, replace the global block (a
	// request capability it leaves out is refused); secrets, when set,
	// are the tenant's alone ({} for none); required adds to the global's.
	Ceiling CeilingConfig `json:"ceiling"`
	// MaxConcurrency bounds the tenant's runs at once (default and at most
	// the global max_concurrency); they hold a global slot too.
	MaxConcurrency int `json:"max_concurrency"`
	// MaxQueue bounds the tenant's runs waiting for one of its slots
	// (default 2×MaxConcurrency, at most the global max_queue; -1 means
	// none). Beyond it a run is refused with 429.
	MaxQueue int `json:"max_queue"`
	// Rate bounds the tenant's runs per unit of time, "60/min" (units s,
	// min, h); beyond it a run is refused with 429 and Retry-After. Up to
	// the count may come at once; the allowance refills evenly over the
	// unit. Empty means no bound.
	Rate string `json:"rate"`
}

// TenantMatch says which peers are the tenant's, by SO_PEERCRED: set
// exactly one key. A uid (or user) match wins over a group one; among
// group matches (primary or supplementary group), the first tenant
// listed wins.
type TenantMatch struct {
	UID   *uint32 `json:"uid"`
	User  string  `json:"user"`
	GID   *uint32 `json:"gid"`
	Group string  `json:"group"`
}

// The values of Config.Others.
const (
	OthersAllow  = "allow"
	OthersRefuse = "refuse"
)

// othersName is the tenant label of the peers that match no tenant.
const othersName = "others"

var tenantName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// tenantRule is a tenant as the config checked it.
type tenantRule struct {
	name string
	// byUID says the rule matches id as a uid, else as a gid.
	byUID bool
	id    uint32
	ceil  job.Ceiling
	max   int
	queue int
	rate  rate
}

// rate is a number of runs per period; the zero rate sets no bound.
type rate struct {
	n   int
	per time.Duration
}

func (r rate) String() string {
	if r.n == 0 {
		return "none"
	}
	unit := map[time.Duration]string{time.Second: "s", time.Minute: "min", time.Hour: "h"}[r.per]
	return fmt.Sprintf("%d/%s", r.n, unit)
}

// parseRate reads "N/s", "N/min" or "N/h".
func parseRate(s string) (rate, error) {
	if s == "" {
		return rate{}, nil
	}
	count, unit, ok := strings.Cut(s, "/")
	n, err := strconv.Atoi(count)
	if !ok || err != nil || n < 1 {
		return rate{}, fmt.Errorf("%q: want a count of runs per unit, such as \"60/min\"", s)
	}
	per, ok := map[string]time.Duration{"s": time.Second, "min": time.Minute, "h": time.Hour}[unit]
	if !ok {
		return rate{}, fmt.Errorf("%q: unit %q (want s, min or h)", s, unit)
	}
	return rate{n: n, per: per}, nil
}

// tenantRules checks the tenants against the global ceiling and bounds.
func (c *Config) tenantRules(global job.Ceiling) ([]tenantRule, error) {
	switch c.Others {
	case "":
		c.Others = OthersAllow
		if len(c.Tenants) > 0 {
			c.Others = OthersRefuse
		}
	case OthersAllow:
	case OthersRefuse:
		if len(c.Tenants) == 0 {
			return nil, errors.New(`others: "refuse" with no tenants would refuse every run`)
		}
	default:
		return nil, fmt.Errorf("others: %q (want allow or refuse)", c.Others)
	}
	var rules []tenantRule
	names := map[string]bool{othersName: true}
	type key struct {
		byUID bool
		id    uint32
	}
	keys := map[key]string{}
	for i, t := range c.Tenants {
		at := fmt.Sprintf("tenants[%d]", i)
		if !tenantName.MatchString(t.Name) {
			return nil, fmt.Errorf("%s.name: %q (want lower-case letters, digits, '-' and '_')", at, t.Name)
		}
		if names[t.Name] {
			return nil, fmt.Errorf("%s.name: %q is taken", at, t.Name)
		}
		names[t.Name] = true
		r := tenantRule{name: t.Name}
		var err error
		if r.byUID, r.id, err = t.Match.resolve(); err != nil {
			return nil, fmt.Errorf("%s.match: %w", at, err)
		}
		if other, dup := keys[key{r.byUID, r.id}]; dup {
			return nil, fmt.Errorf("%s.match: tenant %q matches the same peers", at, other)
		}
		keys[key{r.byUID, r.id}] = t.Name
		if r.ceil, err = t.Ceiling.over(c.Ceiling).JobCeiling(); err != nil {
			return nil, fmt.Errorf("%s.%w", at, err)
		}
		if err := r.ceil.Within(global); err != nil {
			return nil, fmt.Errorf("%s.ceiling.%w", at, err)
		}
		switch {
		case t.MaxConcurrency < 0:
			return nil, fmt.Errorf("%s.max_concurrency: %d is below 0", at, t.MaxConcurrency)
		case t.MaxConcurrency > c.MaxConcurrency:
			return nil, fmt.Errorf("%s.max_concurrency: %d is above the global max_concurrency of %d", at, t.MaxConcurrency, c.MaxConcurrency)
		case t.MaxConcurrency == 0:
			r.max = c.MaxConcurrency
		default:
			r.max = t.MaxConcurrency
		}
		switch {
		case t.MaxQueue < -1:
			return nil, fmt.Errorf("%s.max_queue: %d (want -1 for none, or a count)", at, t.MaxQueue)
		case t.MaxQueue > c.queueLen():
			return nil, fmt.Errorf("%s.max_queue: %d is above the global max_queue of %d", at, t.MaxQueue, c.queueLen())
		case t.MaxQueue == -1:
			r.queue = 0
		case t.MaxQueue == 0:
			r.queue = min(2*r.max, c.queueLen())
		default:
			r.queue = t.MaxQueue
		}
		if r.rate, err = parseRate(t.Rate); err != nil {
			return nil, fmt.Errorf("%s.rate: %w", at, err)
		}
		rules = append(rules, r)
	}
	return rules, nil
}

// resolve is the one id the match names.
func (m TenantMatch) resolve() (byUID bool, id uint32, err error) {
	set := 0
	for _, on := range []bool{m.UID != nil, m.User != "", m.GID != nil, m.Group != ""} {
		if on {
			set++
		}
	}
	if set != 1 {
		return false, 0, errors.New("set exactly one of uid, user, gid and group")
	}
	switch {
	case m.UID != nil:
		return true, *m.UID, nil
	case m.GID != nil:
		return false, *m.GID, nil
	case m.User != "":
		n, err := lookupID(m.User, true)
		if err != nil {
			return false, 0, fmt.Errorf("user: %w", err)
		}
		return true, uint32(n), nil
	default:
		n, err := lookupID(m.Group, false)
		if err != nil {
			return false, 0, fmt.Errorf("group: %w", err)
		}
		return false, uint32(n), nil
	}
}

// over is the tenant's ceiling laid over the global one: what the tenant
// leaves out is the global's. A capabilities block the tenant sets takes
// its log setting, its request methods and bounds from the global block
// where it leaves them out, so that a tenant narrowing the origins is not
// refused for a default above the global bound. Private origins are not
// taken: those are the tenant's own to list.
func (own CeilingConfig) over(global CeilingConfig) CeilingConfig {
	cc := global
	cc.Limits = own.Limits.Merge(global.Limits.Merge(DefaultLimits()))
	if own.Runtimes != nil {
		cc.Runtimes = own.Runtimes
	}
	if own.Profiles != nil {
		cc.Profiles = own.Profiles
	}
	if own.Mode != "" {
		cc.Mode = own.Mode
	}
	cc.Required = slices.Clone(global.Required)
	for _, l := range own.Required {
		if !slices.Contains(cc.Required, l) {
			cc.Required = append(cc.Required, l)
		}
	}
	if own.Capabilities != nil {
		caps := *own.Capabilities
		var g CapabilitiesConfig
		if global.Capabilities != nil {
			g = *global.Capabilities
		}
		if caps.Log == nil {
			caps.Log = g.Log
		}
		if caps.Request != nil && g.Request != nil {
			r, gr := *caps.Request, g.Request
			if r.Methods == nil {
				r.Methods = gr.Methods
			}
			if r.MaxResponseBytes == 0 {
				r.MaxResponseBytes = gr.MaxResponseBytes
			}
			if r.Timeout == 0 {
				r.Timeout = gr.Timeout
			}
			if r.MaxCalls == 0 {
				r.MaxCalls = gr.MaxCalls
			}
			if r.MaxInFlight == 0 {
				r.MaxInFlight = gr.MaxInFlight
			}
			caps.Request = &r
		}
		cc.Capabilities = &caps
	}
	if own.Secrets != nil {
		cc.Secrets = own.Secrets
	}
	return cc
}

// tenant is one tenant as a state applies it.
type tenant struct {
	name   string
	ceil   job.Ceiling
	runner *job.Runner
	// share is the tenant's slots, queue and rate; nil for the peers
	// that match no tenant, who have only the global bounds.
	share *share
}

// share is a tenant's part of the daemon. It outlives a reload, which
// resizes it, so that runs admitted before the reload still count.
type share struct {
	lim    *limiter
	bucket *bucket
}

// tenantFor is the peer's tenant: a uid match first, then the first
// tenant whose group the peer has, then the others if the config allows
// them; nil if it refuses them.
func (st *state) tenantFor(p *Peer) *tenant {
	if p.Err != nil {
		return nil
	}
	for i, r := range st.cfg.derived.tenants {
		if r.byUID && r.id == p.UID {
			return st.tenants[i]
		}
	}
	for i, r := range st.cfg.derived.tenants {
		if !r.byUID && (r.id == p.GID || slices.Contains(p.Groups, r.id)) {
			return st.tenants[i]
		}
	}
	return st.others
}

// bucket is a token bucket: up to n runs at once, refilled at n per per.
type bucket struct {
	mu     sync.Mutex
	r      rate
	tokens float64
	last   time.Time
}

func newBucket(r rate) *bucket {
	return &bucket{r: r, tokens: float64(r.n)}
}

// take spends one run of the allowance, or says how long until there is
// one.
func (b *bucket) take(now time.Time) (wait time.Duration, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.r.n == 0 {
		return 0, true
	}
	b.refillLocked(now)
	if b.tokens >= 1 {
		b.tokens--
		return 0, true
	}
	perRun := float64(b.r.per) / float64(b.r.n)
	return time.Duration(math.Round((1 - b.tokens) * perRun)), false
}

// rate is the bucket's rate.
func (b *bucket) rate() rate {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.r
}

// refund gives back a run taken for one that never ran.
func (b *bucket) refund() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.tokens = min(b.tokens+1, float64(b.r.n))
}

// set changes the rate; the allowance left carries over, within the new
// count.
func (b *bucket) set(r rate, now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	if b.r.n == 0 {
		b.tokens = float64(r.n)
	}
	b.r = r
	b.tokens = min(b.tokens, float64(r.n))
}

func (b *bucket) refillLocked(now time.Time) {
	if !b.last.IsZero() && b.r.n > 0 {
		b.tokens = min(float64(b.r.n), b.tokens+float64(now.Sub(b.last))*float64(b.r.n)/float64(b.r.per))
	}
	b.last = now
}
