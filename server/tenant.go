package server

import (
	"errors"
	"fmt"
	"maps"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/ipc"
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

// tenantRules checks the tenants against the global ceiling and bounds,
// and gives each its share and others theirs (nil when refused).
func (c *Config) tenantRules(global job.Ceiling) ([]tenantRule, *tenantRule, error) {
	switch c.Others {
	case "":
		c.Others = OthersAllow
		if len(c.Tenants) > 0 {
			c.Others = OthersRefuse
		}
	case OthersAllow:
	case OthersRefuse:
		if len(c.Tenants) == 0 {
			return nil, nil, errors.New(`others: "refuse" with no tenants would refuse every run`)
		}
	default:
		return nil, nil, fmt.Errorf("others: %q (want allow or refuse)", c.Others)
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
			return nil, nil, fmt.Errorf("%s.name: %q (want lower-case letters, digits, '-' and '_')", at, t.Name)
		}
		if names[t.Name] {
			return nil, nil, fmt.Errorf("%s.name: %q is taken", at, t.Name)
		}
		names[t.Name] = true
		r := tenantRule{name: t.Name}
		var err error
		if r.byUID, r.id, err = t.Match.resolve(); err != nil {
			if e, ok := errors.AsType[*strictjson.Error](err); ok {
				return nil, nil, fmt.Errorf("%s.match.%s: %w", at, e.Field, e.Err)
			}
			return nil, nil, fmt.Errorf("%s.match: %w", at, err)
		}
		if other, dup := keys[key{r.byUID, r.id}]; dup {
			return nil, nil, fmt.Errorf("%s.match: tenant %q matches the same peers", at, other)
		}
		keys[key{r.byUID, r.id}] = t.Name
		if err := checkLayers(at+".ceiling.required", t.Ceiling.Required); err != nil {
			return nil, nil, err
		}
		if r.ceil, err = t.Ceiling.over(c.Ceiling).JobCeiling(); err != nil {
			return nil, nil, fmt.Errorf("%s.%w", at, err)
		}
		if err := r.ceil.Within(global); err != nil {
			return nil, nil, fmt.Errorf("%s.ceiling.%w", at, err)
		}
		if err := checkOwnSecrets(t.Ceiling, r.ceil); err != nil {
			return nil, nil, fmt.Errorf("%s.ceiling.%w", at, err)
		}
		switch {
		case t.MaxConcurrency < 0:
			return nil, nil, fmt.Errorf("%s.max_concurrency: %d is below 0", at, t.MaxConcurrency)
		case t.MaxConcurrency > c.MaxConcurrency:
			return nil, nil, fmt.Errorf("%s.max_concurrency: %d is above the global max_concurrency of %d", at, t.MaxConcurrency, c.MaxConcurrency)
		}
		r.max = t.MaxConcurrency
		if err := c.checkQueue(at+".max_queue", t.MaxQueue); err != nil {
			return nil, nil, err
		}
		if r.rate, err = parseRate(t.Rate); err != nil {
			return nil, nil, fmt.Errorf("%s.rate: %w", at, err)
		}
		rules = append(rules, r)
	}
	others, err := c.othersRule()
	if err != nil {
		return nil, nil, err
	}
	if err := c.splitShares(rules, others); err != nil {
		return nil, nil, err
	}
	return rules, others, nil
}

// othersRule is the share of the peers that match no tenant, its slots
// still to be split (max 0 when the config leaves them out); nil when the
// config refuses those peers.
func (c *Config) othersRule() (*tenantRule, error) {
	if c.Others == OthersRefuse {
		for key, set := range map[string]bool{
			"others_max_concurrency": c.OthersMaxConcurrency != 0,
			"others_max_queue":       c.OthersMaxQueue != 0,
			"others_rate":            c.OthersRate != "",
		} {
			if set {
				return nil, fmt.Errorf(`%s: set, but others is "refuse" (the default once tenants are configured)`, key)
			}
		}
		return nil, nil
	}
	if c.OthersMaxConcurrency < 0 || c.OthersMaxConcurrency > c.MaxConcurrency {
		return nil, fmt.Errorf("others_max_concurrency: %d (want 0 to the global max_concurrency of %d)", c.OthersMaxConcurrency, c.MaxConcurrency)
	}
	if err := c.checkQueue("others_max_queue", c.OthersMaxQueue); err != nil {
		return nil, err
	}
	r := tenantRule{name: othersName, max: c.OthersMaxConcurrency}
	var err error
	if r.rate, err = parseRate(c.OthersRate); err != nil {
		return nil, fmt.Errorf("others_rate: %w", err)
	}
	return &r, nil
}

// checkQueue refuses a share's max_queue out of bounds.
func (c *Config) checkQueue(key string, q int) error {
	switch {
	case q < -1:
		return fmt.Errorf("%s: %d (want -1 for none, or a count)", key, q)
	case q > c.queueLen():
		return fmt.Errorf("%s: %d is above the global max_queue of %d", key, q, c.queueLen())
	}
	return nil
}

// splitShares gives each share its slots and queue. The shares, others'
// included, must fit in the global max_concurrency: then a run that has a
// slot of its share always finds a global one, and no tenant (nor the
// peers of none) can take another's. A share the config leaves out gets
// an even part of the slots the set ones leave.
func (c *Config) splitShares(rules []tenantRule, others *tenantRule) error {
	type slot struct {
		key   string
		rule  *tenantRule
		queue int
	}
	var all []slot
	for i := range rules {
		all = append(all, slot{fmt.Sprintf("tenants[%d].max_concurrency", i), &rules[i], c.Tenants[i].MaxQueue})
	}
	if others != nil {
		all = append(all, slot{"others_max_concurrency", others, c.OthersMaxQueue})
	}
	set, unset := 0, 0
	for _, s := range all {
		if s.rule.max == 0 {
			unset++
		}
		set += s.rule.max
		if set > c.MaxConcurrency {
			return fmt.Errorf("%s: %d brings the shares (the tenants' max_concurrency, others_max_concurrency) to %d, above the global max_concurrency of %d: a share is guaranteed only while they fit",
				s.key, s.rule.max, set, c.MaxConcurrency)
		}
	}
	each := 0
	if unset > 0 {
		each = (c.MaxConcurrency - set) / unset
	}
	for _, s := range all {
		if s.rule.max == 0 {
			if each == 0 {
				if s.rule == others {
					return fmt.Errorf(`others: "allow", but the tenants' max_concurrency leave no slot of the global %d for others_max_concurrency: lower them, or refuse others`, c.MaxConcurrency)
				}
				return fmt.Errorf("%s: left out, and the %d global slots the shares set leave do not give each of the %d shares left out one: set it", s.key, c.MaxConcurrency-set, unset)
			}
			s.rule.max = each
		}
		switch s.queue {
		case -1:
			s.rule.queue = 0
		case 0:
			s.rule.queue = min(2*s.rule.max, c.queueLen())
		default:
			s.rule.queue = s.queue
		}
	}
	return nil
}

// checkOwnSecrets refuses a secret the tenant sets that it could never
// send: one its request capability leaves out, or one whose origins are
// not all among those its jobs may declare.
func checkOwnSecrets(own CeilingConfig, ceil job.Ceiling) error {
	b := ceil.Broker
	allowed := map[string]bool{}
	for _, o := range append(slices.Clone(b.Origins), b.PrivateOrigins...) {
		if n, err := ipc.NormalizeOrigin(o); err == nil {
			allowed[n] = true
		}
	}
	for _, name := range slices.Sorted(maps.Keys(own.Secrets)) {
		if !b.AllowRequest {
			return fmt.Errorf("secrets[%q]: the tenant's capabilities allow no request to send it with", name)
		}
		if b.Origins == nil {
			continue // any origin
		}
		for i, o := range own.Secrets[name].Origins {
			if n, err := ipc.NormalizeOrigin(o); err == nil && !allowed[n] {
				return fmt.Errorf("secrets[%q].origins[%d]: %q is not among the tenant's request origins: the secret could never be sent there", name, i, o)
			}
		}
	}
	return nil
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
			return false, 0, strictjson.Errorf("user", "%w", err)
		}
		return true, uint32(n), nil
	default:
		n, err := lookupID(m.Group, false)
		if err != nil {
			return false, 0, strictjson.Errorf("group", "%w", err)
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
	// share is the tenant's slots, queue and rate; others have one too.
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
// them; nil if it refuses them. A peer whose supplementary groups could
// not be read is refused if a tenant matches by group: it might be that
// tenant's, and others may have a wider ceiling.
func (st *state) tenantFor(p *Peer) *tenant {
	if p.Err != nil {
		return nil
	}
	for i, r := range st.cfg.derived.tenants {
		if r.byUID && r.id == p.UID {
			return st.tenants[i]
		}
	}
	if p.GroupsErr != nil && st.byGroup() {
		return nil
	}
	for i, r := range st.cfg.derived.tenants {
		if !r.byUID && (r.id == p.GID || slices.Contains(p.Groups, r.id)) {
			return st.tenants[i]
		}
	}
	return st.others
}

// byGroup reports whether a tenant matches by group.
func (st *state) byGroup() bool {
	return slices.ContainsFunc(st.cfg.derived.tenants, func(r tenantRule) bool { return !r.byUID })
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

// whole reports whether the bucket is full again at now.
func (b *bucket) whole(now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.refillLocked(now)
	return b.tokens >= float64(b.r.n)
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
