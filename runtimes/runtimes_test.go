package runtimes

import (
	"errors"
	"slices"
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
	for s, want := range map[string]Dialect{"ts": TypeScript, "typescript": TypeScript, "jsx": JSX, "tsx": TSX,
		"deno": JavaScript, "js": JavaScript, "javascript": JavaScript, "TypeScript": JavaScript, "TSX": JavaScript} {
		if got := DialectOf(s); got != want {
			t.Errorf("DialectOf(%q) = %q, want %q", s, got, want)
		}
	}
}

// A one-file Deno program is the job's file of its dialect's extension,
// which the bootstrap imports (Deno reads the dialect by it); a file's
// extension picks Deno for every dialect.
func TestLaunchDialect(t *testing.T) {
	in := &Install{DenoPath: "/nonexistent/deno", StateDir: t.TempDir()}
	for d, main := range map[Dialect]string{"": "main.js", JavaScript: "main.js", TypeScript: "main.ts", JSX: "main.jsx", TSX: "main.tsx"} {
		l, err := in.Launch(Guest{Runtime: Deno, Source: []byte("1"), Dialect: d})
		if err != nil {
			t.Fatal(err)
		}
		path := JobDir + "/" + main
		if !slices.ContainsFunc(l.Files, func(f File) bool { return f.Path == path }) || l.Args[len(l.Args)-1] != path {
			t.Errorf("dialect %q: args %v, want the program at %s, the bootstrap's argument", d, l.Args, path)
		}
	}
	for _, name := range []string{"a.js", "a.mjs", "a.jsx", "a.ts", "a.mts", "a.tsx", "A.TSX"} {
		if rt, err := ForFile(name); rt != Deno || err != nil {
			t.Errorf("ForFile(%q) = %q %v, want deno", name, rt, err)
		}
	}
	if _, err := ForFile("a.vue"); !errors.Is(err, ErrUnknownRuntime) {
		t.Errorf("ForFile(a.vue): %v, want ErrUnknownRuntime", err)
	}
}
