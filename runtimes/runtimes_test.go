package runtimes

import (
	"errors"
	"testing"
)

// The socket API takes runtime names exactly as its OpenAPI enum spells
// them: a proxy that filters jobs by that string must see what runs.
func TestParseNameIsExact(t *testing.T) {
	for _, s := range Names() {
		if _, err := ParseName(s); err != nil {
			t.Errorf("%q: %v, want it accepted", s, err)
		}
	}
	for s, want := range map[string]Name{"deno": Deno, "typescript": Deno, "js": Deno, "python": Python, "pyodide": Python} {
		if got, err := ParseName(s); got != want || err != nil {
			t.Errorf("%q: %q %v, want %q", s, got, err, want)
		}
	}
	for _, s := range []string{"PyThOn", "DENO", "Deno", "TypeScript", "PY", " deno", "deno ", "", "cobol"} {
		if n, err := ParseName(s); !errors.Is(err, ErrUnknownRuntime) {
			t.Errorf("%q: %q %v, want ErrUnknownRuntime", s, n, err)
		}
	}
	for s, want := range map[string]bool{"ts": true, "typescript": true, "deno": false, "TypeScript": false, "js": false} {
		if TypeScript(s) != want {
			t.Errorf("TypeScript(%q) = %v, want %v", s, !want, want)
		}
	}
}
