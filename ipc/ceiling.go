package ipc

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/pmjail/pmjail/internal/strictjson"
)

// Ceiling is the operator's limit on what any job may ask for and on what
// the broker will do for it. It comes from the daemon config; the CLI uses
// PermissiveCeiling. Zero numeric fields take the defaults below.
type Ceiling struct {
	AllowLog     bool
	AllowRequest bool
	// Origins a job may declare; nil means any.
	Origins []string
	// Methods a job may declare; nil means any of AllMethods.
	Methods []string
	// AllowPrivateAddresses lets requests reach loopback, private, link-local,
	// CGNAT and metadata addresses through host names too. Without it only a
	// declared literal IP origin reaches such an address (never a metadata
	// or multicast one).
	AllowPrivateAddresses bool
	MaxResponseBytes      int64         // default 2 MiB
	RequestTimeout        time.Duration // per call cap, default 10s
	MaxCalls              int           // broker calls per run, default 1000
	MaxInFlight           int           // concurrent request.send calls, default 16
	FrameTimeout          time.Duration // a frame that starts must finish within this, default 5s
	WriteTimeout          time.Duration // a frame to the guest must be taken within this, default 10s
	MaxFrame              int           // default DefaultMaxFrame
	MaxLogs               int           // log entries kept per run, default 1000
	MaxLogMessage         int           // bytes of one log message (longer ones are cut), default 8 KiB
	MaxLogBytes           int           // bytes of all log messages and meta per run, default 1 MiB
	// Secrets the broker may inject, by name.
	Secrets map[string]Secret

	// originSet is Origins normalised, filled in by Prepare so that Within
	// does not normalise the operator's origins again for every job. Set
	// Origins before Prepare, not after.
	originSet map[string]bool
}

// Secret is a credential the broker adds to a request as a header.
type Secret struct {
	Header string // default "Authorization"
	Value  string
}

// Defaults for Ceiling's zero fields.
const (
	DefaultMaxResponseBytes = 2 << 20
	DefaultRequestTimeout   = 10 * time.Second
	DefaultMaxCalls         = 1000
	DefaultMaxInFlight      = 16
	DefaultFrameTimeout     = 5 * time.Second
	DefaultWriteTimeout     = 10 * time.Second
	DefaultMaxLogs          = 1000
	DefaultMaxLogMessage    = 8 << 10
	DefaultMaxLogBytes      = 1 << 20
)

// PermissiveCeiling is the CLI's ceiling: every capability, any origin and
// method, no private addresses except declared literal IPs, default limits.
func PermissiveCeiling() Ceiling {
	return Ceiling{AllowLog: true, AllowRequest: true}.WithDefaults()
}

// WithDefaults returns c with every zero limit set to its default.
func (c Ceiling) WithDefaults() Ceiling {
	setDefault(&c.MaxResponseBytes, DefaultMaxResponseBytes)
	setDefault(&c.RequestTimeout, DefaultRequestTimeout)
	setDefault(&c.MaxCalls, DefaultMaxCalls)
	setDefault(&c.MaxInFlight, DefaultMaxInFlight)
	setDefault(&c.FrameTimeout, DefaultFrameTimeout)
	setDefault(&c.WriteTimeout, DefaultWriteTimeout)
	setDefault(&c.MaxFrame, DefaultMaxFrame)
	setDefault(&c.MaxLogs, DefaultMaxLogs)
	setDefault(&c.MaxLogMessage, DefaultMaxLogMessage)
	setDefault(&c.MaxLogBytes, DefaultMaxLogBytes)
	return c
}

func setDefault[T int | int64 | time.Duration](p *T, def T) {
	if *p <= 0 {
		*p = def
	}
}

// Prepare returns c checked (Validate) and ready for every job: zero limits
// set to their defaults (WithDefaults) and the origins normalised once.
func (c Ceiling) Prepare() (Ceiling, error) {
	if err := c.Validate(); err != nil {
		return c, err
	}
	c = c.WithDefaults()
	c.originSet = nil
	if c.Origins != nil {
		c.originSet = normalizeOrigins(c.Origins)
	}
	return c, nil
}

// normalizeOrigins is the set of origins normalised, leaving out any that
// are not origins (Validate reports those).
func normalizeOrigins(origins []string) map[string]bool {
	set := make(map[string]bool, len(origins))
	for _, o := range origins {
		if n, err := NormalizeOrigin(o); err == nil {
			set[n] = true
		}
	}
	return set
}

// Validate checks the operator's own config: origins and methods well formed,
// secrets with a value and a header that can be sent.
func (c Ceiling) Validate() error {
	for i, o := range c.Origins {
		if _, err := NormalizeOrigin(o); err != nil {
			return fmt.Errorf("ceiling.origins[%d]: %w", i, err)
		}
	}
	for i, m := range c.Methods {
		if !slices.Contains(AllMethods, m) {
			return fmt.Errorf("ceiling.methods[%d]: %q is not one of %s", i, m, strings.Join(AllMethods, " "))
		}
	}
	for _, name := range sortedKeys(c.Secrets) {
		s := c.Secrets[name]
		if s.Value == "" {
			return fmt.Errorf("ceiling.secrets[%q]: empty value", name)
		}
		if s.Header != "" && !validHeaderName(s.Header) {
			return fmt.Errorf("ceiling.secrets[%q].header: %q is not a valid header name", name, s.Header)
		}
		if !validHeaderValue(s.Value) {
			return fmt.Errorf("ceiling.secrets[%q]: the value holds characters a header cannot carry", name)
		}
	}
	return nil
}

// header returns the header name the secret goes in.
func (s Secret) header() string {
	if s.Header == "" {
		return "Authorization"
	}
	return s.Header
}

// Within reports the first thing the job asks for beyond the ceiling, naming
// the field (a *strictjson.Error). Call Validate on the capabilities first.
func (c Capabilities) Within(ceil Ceiling) error {
	if c.Log && !ceil.AllowLog {
		return strictjson.Errorf("capabilities.log", "not allowed by the operator")
	}
	r := c.Request
	if r == nil {
		return nil
	}
	if !ceil.AllowRequest {
		return strictjson.Errorf("capabilities.request", "not allowed by the operator")
	}
	if ceil.Origins != nil {
		allowed := ceil.originSet
		if allowed == nil { // a Ceiling built in code, not by Prepare
			allowed = normalizeOrigins(ceil.Origins)
		}
		for i, u := range r.URLs {
			n, err := NormalizeOrigin(u)
			if err != nil {
				return strictjson.Errorf(fmt.Sprintf("capabilities.request.urls[%d]", i), "%w", err)
			}
			if !allowed[n] {
				return strictjson.Errorf(fmt.Sprintf("capabilities.request.urls[%d]", i), "%q is not among the operator's allowed origins", u)
			}
		}
	}
	if ceil.Methods != nil {
		for i, m := range r.methods() {
			if !slices.Contains(ceil.Methods, m) {
				if len(r.Methods) == 0 {
					return strictjson.Errorf("capabilities.request.methods", "the default GET is not allowed by the operator")
				}
				return strictjson.Errorf(fmt.Sprintf("capabilities.request.methods[%d]", i), "%q is not allowed by the operator", m)
			}
		}
	}
	for _, origin := range sortedKeys(r.Auth) {
		name := r.Auth[origin]
		if _, ok := ceil.Secrets[name]; !ok {
			return strictjson.Errorf(fmt.Sprintf("capabilities.request.auth[%q]", origin), "no secret %q is configured", name)
		}
	}
	return nil
}
