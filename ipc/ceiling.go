package ipc

import (
	"fmt"
	"net/netip"
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
	// AllowPrivateAddresses lets requests reach loopback, private,
	// link-local, CGNAT and metadata addresses, by name or literal.
	AllowPrivateAddresses bool
	// PrivateOrigins are origins the operator lets reach a private address
	// (loopback, RFC 1918, ULA, IPv6 link-local, CGNAT; never a metadata,
	// IPv4 link-local or reserved one) without AllowPrivateAddresses: a
	// literal such as "http://127.0.0.1:8080", or a name, whose addresses
	// are then trusted. A job may declare them even when Origins does not
	// list them.
	PrivateOrigins []string
	// TrustDeclaredLiterals makes a private literal IP origin that the job
	// declares count as if it were in PrivateOrigins. Only for the CLI,
	// whose user writes the capabilities and is their own operator; a
	// daemon's clients never get it.
	TrustDeclaredLiterals bool
	MaxResponseBytes      int64         // default 2 MiB
	RequestTimeout        time.Duration // per call cap, default 10s
	MaxCalls              int           // broker calls per run, default 1000
	MaxInFlight           int           // concurrent request.send calls, default 16
	FrameTimeout          time.Duration // a frame that starts must finish within this, default 5s
	WriteTimeout          time.Duration // a frame to the guest must be taken within this, default 10s
	MaxFrame              int           // default DefaultMaxFrame
	MaxLogs               int           // log entries kept per run, default 1000
	MaxLogMessage         int           // bytes of one log message (longer ones are cut), default 8 KiB
	MaxLogBytes           int           // bytes of all log messages and meta per run as the result holds them (JSON, HTML-safe), default 1 MiB
	// MaxGuestBytes bounds the bytes of the frames the host decodes for
	// one run (a frame counted as at least 512 bytes), default 64 MiB:
	// decoding costs the daemon many times what writing costs the guest,
	// and none of it is the run's CPU time. Past it, calls are answered
	// rate_limited and notes dropped, each read past by its head only, up
	// to 16,384 of them (ipc/PROTOCOL.md).
	MaxGuestBytes int64
	// Secrets the broker may inject, by name.
	Secrets map[string]Secret

	// originSet is Origins normalised, filled in by Prepare so that Within
	// does not normalise the operator's origins again for every job. Set
	// Origins before Prepare, not after.
	originSet map[string]bool
	// privateSet is PrivateOrigins normalised, filled in by Prepare.
	privateSet map[string]bool
}

// Secret is a credential the broker adds to a request as a header.
type Secret struct {
	Header string // default "Authorization"
	Value  string
	// Origins the secret may be sent to, and no other: a job may map it to
	// one of these only, and the broker sends it to no other (redirects
	// included). Required: a secret that could go anywhere could be sent
	// to a server that echoes it back.
	Origins []string
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
	DefaultMaxGuestBytes    = 64 << 20
)

// PermissiveCeiling is the CLI's ceiling: every capability, any origin and
// method, no private addresses except declared literal IPs, default limits.
func PermissiveCeiling() Ceiling {
	return Ceiling{AllowLog: true, AllowRequest: true, TrustDeclaredLiterals: true}.WithDefaults()
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
	setDefault(&c.MaxGuestBytes, DefaultMaxGuestBytes)
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
	c.privateSet = normalizeOrigins(c.PrivateOrigins)
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
	for i, o := range c.PrivateOrigins {
		if _, err := NormalizeOrigin(o); err != nil {
			return fmt.Errorf("ceiling.private_origins[%d]: %w", i, err)
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
		if len(s.Origins) == 0 {
			return fmt.Errorf("ceiling.secrets[%q].origins: required: the origins the secret may be sent to", name)
		}
		for i, o := range s.Origins {
			if _, err := NormalizeOrigin(o); err != nil {
				return fmt.Errorf("ceiling.secrets[%q].origins[%d]: %w", name, i, err)
			}
		}
	}
	return nil
}

// sendsTo reports whether the secret may go to origin (normalised).
func (s Secret) sendsTo(origin string) bool {
	for _, o := range s.Origins {
		if n, err := NormalizeOrigin(o); err == nil && n == origin {
			return true
		}
	}
	return false
}

// privateOrigins is PrivateOrigins normalised.
func (c Ceiling) privateOrigins() map[string]bool {
	if c.privateSet != nil || c.PrivateOrigins == nil {
		return c.privateSet
	}
	return normalizeOrigins(c.PrivateOrigins) // a Ceiling built in code
}

// literalAllowed reports whether the ceiling lets a job declare the literal
// IP origin n (normalised) whose address is a, or what refuses it.
func (c Ceiling) literalAllowed(n string, a netip.Addr) error {
	named := c.privateOrigins()[n] || c.TrustDeclaredLiterals
	if addrAllowed(a, named, c.AllowPrivateAddresses) {
		return nil
	}
	if classify(a) == addrPrivate {
		return fmt.Errorf("%s is a private address: the operator must list the origin in private_origins", a)
	}
	return fmt.Errorf("%s is a metadata, link-local or reserved address", a)
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
	allowed := ceil.originSet
	if allowed == nil && ceil.Origins != nil { // a Ceiling built in code, not by Prepare
		allowed = normalizeOrigins(ceil.Origins)
	}
	private := ceil.privateOrigins()
	for i, u := range r.URLs {
		field := fmt.Sprintf("capabilities.request.urls[%d]", i)
		n, err := NormalizeOrigin(u)
		if err != nil {
			return strictjson.Errorf(field, "%w", err)
		}
		if ceil.Origins != nil && !allowed[n] && !private[n] {
			return strictjson.Errorf(field, "%q is not among the operator's allowed origins", u)
		}
		// A literal address is judged now; a name when it is resolved.
		if a, err := originAddr(n); err == nil {
			if err := ceil.literalAllowed(n, a); err != nil {
				return strictjson.Errorf(field, "%q: %w", u, err)
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
		field := fmt.Sprintf("capabilities.request.auth[%q]", origin)
		s, ok := ceil.Secrets[name]
		if !ok {
			return strictjson.Errorf(field, "no secret %q is configured", name)
		}
		if n, err := NormalizeOrigin(origin); err != nil || !s.sendsTo(n) {
			return strictjson.Errorf(field, "secret %q may not be sent to %s (not among its origins)", name, origin)
		}
	}
	return nil
}
