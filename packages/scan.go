package packages

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrNotAllowed is returned for a job that imports a package the operator
// does not let it use.
var ErrNotAllowed = errors.New("package not allowed")

// Scan returns the npm packages a JavaScript or TypeScript source names
// in its npm: specifiers (a subpath dropped), each once, in order. A
// specifier without an exact version, or a jsr: one (JSR packages are not
// stored), is an error naming it. The scan is a courtesy, an early and
// clear refusal: a specifier the code computes escapes it, and the job's
// root, which holds only the allowed packages, still refuses it.
func Scan(source string) ([]Ref, error) {
	var refs []Ref
	for _, spec := range specifiers(source) {
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

// specifiers are the npm: and jsr: specifiers in string literals, in
// order, what a static import, a re-export or a literal dynamic import
// names: after a quote, "npm:" or "jsr:" and the bytes up to the next
// quote or ASCII space, as the regular expression
// ["'`]((?:npm|jsr):[^"'`\s]*) finds them (FuzzScan holds the two equal).
// A match holds no quote past its first byte, so matches never overlap:
// every quote followed by a scheme starts one. The schemes are looked for
// with strings.Index: a regular expression without a literal prefix to skip
// by walks every byte of the source, slowly, on every run's path.
func specifiers(source string) []string {
	var specs []string
	npm, jsr := -1, -1 // the next "npm:" and "jsr:" at or after i, once found
	for i := 0; ; {
		if npm < i {
			npm = indexFrom(source, i, "npm:")
		}
		if jsr < i {
			jsr = indexFrom(source, i, "jsr:")
		}
		at := min(npm, jsr)
		if at > len(source) {
			return specs
		}
		end := at + len("npm:")
		if at > 0 && isQuote(source[at-1]) {
			for end < len(source) && !isQuote(source[end]) && !isSpace(source[end]) {
				end++
			}
			specs = append(specs, source[at:end])
		}
		i = end
	}
}

// indexFrom is the index of the first sep in source at or after i, or
// past the end of source if there is none.
func indexFrom(source string, i int, sep string) int {
	j := strings.Index(source[i:], sep)
	if j < 0 {
		return len(source) + 1 // past every i: not looked for again
	}
	return i + j
}

func isQuote(b byte) bool { return b == '"' || b == '\'' || b == '`' }

// isSpace is the regexp syntax's \s: ASCII space, \t, \n, \f and \r.
func isSpace(b byte) bool {
	return b == ' ' || b == '\t' || b == '\n' || b == '\f' || b == '\r'
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
