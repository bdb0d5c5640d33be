package packages

import (
	"regexp"
	"slices"
	"strings"
	"testing"
)

// specifierPattern is what specifiers finds, as a regular expression.
var specifierPattern = regexp.MustCompile("[\"'`]((?:npm|jsr):[^\"'`\\s]*)")

func specifiersByPattern(source string) []string {
	var specs []string
	for _, m := range specifierPattern.FindAllStringSubmatch(source, -1) {
		specs = append(specs, m[1])
	}
	return specs
}

var scanSeeds = []string{
	``,
	`npm:`,
	`"npm:`,
	`"npm:left@1.0.0"`,
	`import a from "npm:left@1.0.0"; import b from 'jsr:@std/path@1';`,
	"`npm:left@${v}`",
	`"npm:a@1"npm:b@2"jsr:c'npm:d e"npm:f` + "\tnpm:g\f'npm:h\r\"npm:i\v",
	`xnpm:a "xnpm:b" "npm:npm:c" "jsr:npm:d" ""npm:e` + "\"npm:\xff\xfe\"jsr:é ",
	`'jsr:'npm:"jsr:` + "`",
	`npm:jsr:npm:"`,
}

func TestSpecifiers(t *testing.T) {
	for _, src := range scanSeeds {
		if got, want := specifiers(src), specifiersByPattern(src); !slices.Equal(got, want) {
			t.Errorf("specifiers(%q) = %q, want %q", src, got, want)
		}
	}
	big := strings.Repeat("a", 1<<20) + `"npm:left@1.0.0"`
	if got := specifiers(big); !slices.Equal(got, []string{"npm:left@1.0.0"}) {
		t.Errorf("specifiers after a megabyte = %q", got)
	}
}

// FuzzScan holds specifiers equal to the regular expression it replaces.
func FuzzScan(f *testing.F) {
	for _, s := range scanSeeds {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		if got, want := specifiers(src), specifiersByPattern(src); !slices.Equal(got, want) {
			t.Errorf("specifiers(%q) = %q, want %q", src, got, want)
		}
	})
}

// BenchmarkScan is a megabyte of source without a specifier, as most
// programs are: the scan that was the regular expression's.
func BenchmarkScan(b *testing.B) {
	src := `import x from "./x.js";` + "\n" + strings.Repeat(`const s = "a"; // npm is not here`+"\n", 1<<20/34)
	b.SetBytes(int64(len(src)))
	b.Run("index", func(b *testing.B) {
		for b.Loop() {
			if specifiers(src) != nil {
				b.Fatal("found one")
			}
		}
	})
	b.Run("regexp", func(b *testing.B) {
		for b.Loop() {
			if specifiersByPattern(src) != nil {
				b.Fatal("found one")
			}
		}
	})
}
