package job

import (
	"errors"
	"fmt"
	"testing"

	"github.com/pmjail/pmjail/packages"
)

func TestResolvePackages(t *testing.T) {
	ceil := DefaultCeiling()
	var err error
	if ceil.Packages, err = packages.ParseRefs([]string{"npm:left@1.0.0", "py:greet@1.0"}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		runtime, source, want string
	}{
		{"js", `import { pad } from "npm:left@1.0.0";`, "[npm:left@1.0.0]"},
		{"ts", `const m = await import("npm:" + name);`, "[npm:left@1.0.0]"},
		// No npm: at all: no view, and the run keeps the warm cache.
		{"js", `export default () => 1;`, "[]"},
		{"python", `import greet`, "[py:greet@1.0]"},
	} {
		r, err := Resolve(&Request{Runtime: tc.runtime, Source: tc.source}, ceil, false)
		if err != nil {
			t.Fatalf("%s: %v", tc.source, err)
		}
		if got := fmt.Sprint(r.Packages); got != tc.want {
			t.Errorf("%s: packages %s, want %s", tc.source, got, tc.want)
		}
	}
	for src, want := range map[string]string{
		`import r from "npm:right@1.0.0";`: "package not allowed: npm:right@1.0.0 is not among the packages jobs may use here",
		`import l from "npm:left@1.0.1";`:  "package not allowed: npm:left@1.0.1: this version is not allowed (allowed: npm:left@1.0.0)",
		`import l from "npm:left";`:        `invalid package reference "npm:left": no version; pin an exact one (npm:left@X.Y.Z)`,
	} {
		_, err := Resolve(&Request{Runtime: "js", Source: src}, ceil, false)
		msg, field := Refusal(err)
		if !errors.Is(err, ErrInvalid) || field != "source" || msg != "source: "+want {
			t.Errorf("%s: %v (field %q, message %q), want a refusal at source: %s", src, err, field, msg, want)
		}
	}
}

func TestCeilingWithinPackages(t *testing.T) {
	outer, inner := DefaultCeiling(), DefaultCeiling()
	outer.Packages, _ = packages.ParseRefs([]string{"npm:left@1.0.0"})
	inner.Packages, _ = packages.ParseRefs([]string{"npm:left@1.0.0", "npm:right@1.0.0"})
	if err := inner.Within(outer); err == nil || err.Error() != "packages[1]: npm:right@1.0.0 is not allowed by the global ceiling" {
		t.Fatalf("Within: %v", err)
	}
	inner.Packages = inner.Packages[:1]
	if err := inner.Within(outer); err != nil {
		t.Fatal(err)
	}
}
