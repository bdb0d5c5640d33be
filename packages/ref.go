package packages

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
)

// Kinds of package.
const (
	NPM    = "npm" // an npm tarball, imported as npm:NAME@VERSION
	Python = "py"  // a pure-Python wheel, on sys.path
)

// ErrInvalidRef is returned for a package reference that is not
// KIND:NAME@EXACT-VERSION.
var ErrInvalidRef = errors.New("invalid package reference")

// Ref names one package at one exact version: npm:zod@3.23.8,
// npm:@scope/name@1.0.0, py:name@1.0.
type Ref struct {
	Kind    string
	Name    string
	Version string
}

func (r Ref) String() string { return r.Kind + ":" + r.Name + "@" + r.Version }

// The patterns compile at their first use, not in every pmjail process's
// start: most runs name no package, and compiled at init they cost each
// CLI run ~0.2 ms (GODEBUG=inittrace=1).
var (
	npmName = lazyRegexp(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*$`)
	// An exact semantic version: no range, no tag.
	npmVersion = lazyRegexp(`^(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$`)
	pyName     = lazyRegexp(`^[a-z0-9]([a-z0-9_]*[a-z0-9])?$`)
	// A PEP 440 version as wheels spell it in their file names.
	pyVersion = lazyRegexp(`^([0-9]+!)?[0-9]+(\.[0-9]+)*((a|b|rc)[0-9]+)?(\.post[0-9]+)?(\.dev[0-9]+)?(\+[a-z0-9.]+)?$`)
)

// lazyRegexp is pattern, compiled at the first call.
func lazyRegexp(pattern string) func() *regexp.Regexp {
	return sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(pattern) })
}

// ParseRef parses KIND:NAME@VERSION. The version must be exact: a range
// (^1.2.0, ~1, >=2), a tag (latest) or none at all is refused, naming
// what to write instead.
func ParseRef(s string) (Ref, error) {
	kind, rest, ok := strings.Cut(s, ":")
	if !ok || (kind != NPM && kind != Python) {
		return Ref{}, fmt.Errorf("%w %q: want npm:NAME@X.Y.Z or py:NAME@VERSION", ErrInvalidRef, s)
	}
	// A scoped npm name starts with @: the version's @ is the last one.
	at := strings.LastIndex(rest, "@")
	if at <= 0 {
		return Ref{}, fmt.Errorf("%w %q: no version; pin an exact one (%s:%s@X.Y.Z)", ErrInvalidRef, s, kind, rest)
	}
	r := Ref{Kind: kind, Name: rest[:at], Version: rest[at+1:]}
	if kind == Python {
		r.Name = PyName(r.Name)
	}
	return r, r.check()
}

func (r Ref) check() error {
	switch r.Kind {
	case NPM:
		if !npmName().MatchString(r.Name) {
			return fmt.Errorf("%w %q: %q is not an npm package name", ErrInvalidRef, r.String(), r.Name)
		}
		if !npmVersion().MatchString(r.Version) {
			return fmt.Errorf("%w %q: version %q is not exact; pin one version (X.Y.Z), not a range or a tag", ErrInvalidRef, r.String(), r.Version)
		}
	case Python:
		if !pyName().MatchString(r.Name) {
			return fmt.Errorf("%w %q: %q is not a Python distribution name", ErrInvalidRef, r.String(), r.Name)
		}
		if !pyVersion().MatchString(r.Version) {
			return fmt.Errorf("%w %q: version %q is not exact; pin one version (1.0, 2.3.1), not a range", ErrInvalidRef, r.String(), r.Version)
		}
	default:
		return fmt.Errorf("%w %q: unknown kind %q", ErrInvalidRef, r.String(), r.Kind)
	}
	return nil
}

// PyName is a distribution name as wheel file names spell it (PEP 427 and
// 503): lower case, each run of -, _ and . one _.
func PyName(s string) string {
	s = strings.ToLower(s)
	var b strings.Builder
	sep := false
	for _, c := range s {
		if c == '-' || c == '_' || c == '.' {
			sep = true
			continue
		}
		if sep && b.Len() > 0 {
			b.WriteByte('_')
		}
		sep = false
		b.WriteRune(c)
	}
	return b.String()
}

// ParseRefs parses a list of references, each error naming its index.
func ParseRefs(list []string) ([]Ref, error) {
	refs := make([]Ref, 0, len(list))
	for i, s := range list {
		r, err := ParseRef(s)
		if err != nil {
			return nil, fmt.Errorf("[%d]: %w", i, err)
		}
		refs = append(refs, r)
	}
	return refs, nil
}
