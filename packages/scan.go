package packages

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotAllowed is returned for a job that imports a package the operator
// does not let it use.
var ErrNotAllowed = errors.New("package not allowed")

// specifier finds npm: and jsr: specifiers in string literals: what a
// static import, a re-export or a literal dynamic import names.
var specifier = lazyRegexp("[\"'`]((?:npm|jsr):[^\"'`\\s]*)")

// Scan returns the npm packages a JavaScript or TypeScript source names
// in its npm: specifiers (a subpath dropped), each once, in order. A
// specifier without an exact version, or a jsr: one (JSR packages are not
// stored), is an error naming it. The scan is a courtesy, an early and
// clear refusal: a specifier the code computes escapes it, and the job's
// root, which holds only the allowed packages, still refuses it.
func Scan(source []byte) ([]Ref, error) {
	if !bytes.Contains(source, []byte("npm:")) && !bytes.Contains(source, []byte("jsr:")) {
		return nil, nil // nothing specifier can match
	}
	var refs []Ref
	for _, m := range specifier().FindAllSubmatch(source, -1) {
		spec := string(m[1])
		if strings.HasSuffix(spec, ":") || strings.HasSuffix(spec, "@") || strings.HasSuffix(spec, "/") || strings.Contains(spec, "${") {
			continue // a prefix the code completes: the root decides
		}
		if strings.HasPrefix(spec, "jsr:") {
			return nil, fmt.Errorf("%w: %s: jsr: packages are not supported; use the npm: form of a vetted package", ErrNotAllowed, spec)
		}
		ref, err := parseSpecifier(spec)
		if err != nil {
			return nil, err
		}
		if !slices.Contains(refs, ref) {
			refs = append(refs, ref)
		}
	}
	return refs, nil
}

// parseSpecifier parses npm:NAME@VERSION[/SUBPATH].
func parseSpecifier(spec string) (Ref, error) {
	rest := strings.TrimPrefix(spec, "npm:")
	rest = strings.TrimPrefix(rest, "/")
	nameEnd := 0
	if strings.HasPrefix(rest, "@") {
		slash := strings.Index(rest, "/")
		if slash < 0 {
			return Ref{}, fmt.Errorf("%w %q: a scoped name needs /NAME", ErrInvalidRef, spec)
		}
		nameEnd = slash + 1
	}
	at := strings.Index(rest[nameEnd:], "@")
	if at < 0 {
		name, _, _ := strings.Cut(rest[nameEnd:], "/")
		return Ref{}, fmt.Errorf("%w %q: no version; pin an exact one (npm:%s@X.Y.Z)", ErrInvalidRef, spec, rest[:nameEnd]+name)
	}
	name := rest[:nameEnd+at]
	version, _, _ := strings.Cut(rest[nameEnd+at+1:], "/")
	r := Ref{Kind: NPM, Name: name, Version: version}
	return r, r.check()
}

// Allowed checks that every ref is in allowed, naming the first that is
// not and what is allowed instead.
func Allowed(refs, allowed []Ref) error {
	for _, r := range refs {
		if slices.Contains(allowed, r) {
			continue
		}
		var same []string
		for _, a := range allowed {
			if a.Kind == r.Kind && a.Name == r.Name {
				same = append(same, a.String())
			}
		}
		if len(same) > 0 {
			return fmt.Errorf("%w: %s: this version is not allowed (allowed: %s)", ErrNotAllowed, r, strings.Join(same, ", "))
		}
		return fmt.Errorf("%w: %s is not among the packages jobs may use here", ErrNotAllowed, r)
	}
	return nil
}
