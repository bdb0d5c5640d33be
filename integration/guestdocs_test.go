package integration

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// guestDocs is the page for guest authors whose examples this test runs.
const guestDocs = "../docs/guest-api.md"

// docExample is one fenced block marked runnable, and the result block
// after it.
type docExample struct {
	line   int
	lang   string
	flags  []string
	source string
	want   json.RawMessage
	// files are the blocks marked file=PATH just before it: written
	// beside the example's main file, at PATH.
	files map[string]string
}

// TestGuestDocsExamples runs every example on docs/guest-api.md marked
// runnable, anywhere on the page, and checks its result against the
// `json result` block that follows it (status ok when there is none).
// {{ORIGIN}} in an example or its flags is a local HTTP origin; {{DIR}}
// among its flags is the directory the example's files are written to,
// run as a whole in place of its main file.
func TestGuestDocsExamples(t *testing.T) {
	examples := readDocExamples(t, guestDocs)
	if len(examples) < 10 {
		t.Fatalf("%s: %d runnable examples; the page lost its examples or their markers", guestDocs, len(examples))
	}
	srv := newTestServer(t)
	ext := map[string]string{"js": ".js", "javascript": ".js", "jsx": ".jsx", "ts": ".ts", "typescript": ".ts", "tsx": ".tsx", "py": ".py", "python": ".py"}
	for _, ex := range examples {
		t.Run(fmt.Sprintf("line%d", ex.line), func(t *testing.T) {
			e, ok := ext[ex.lang]
			if !ok {
				t.Fatalf("%s:%d: a runnable block in %q, which no runtime takes", guestDocs, ex.line, ex.lang)
			}
			dir := t.TempDir()
			expand := strings.NewReplacer("{{ORIGIN}}", srv.origin, "{{DIR}}", dir)
			path := filepath.Join(dir, "main"+e)
			args := []string{"run", "--json"}
			for _, f := range ex.flags {
				if f == "{{DIR}}" {
					path = ""
				}
				args = append(args, expand.Replace(f))
			}
			if path != "" {
				args = append(args, path)
			}
			for name, text := range ex.files {
				full := filepath.Join(dir, filepath.FromSlash(name))
				if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(full, []byte(expand.Replace(text)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := os.WriteFile(filepath.Join(dir, "main"+e), []byte(expand.Replace(ex.source)), 0o644); err != nil {
				t.Fatal(err)
			}
			inv := pmjailCmd(t, "", args...)
			var got any
			if err := json.Unmarshal([]byte(inv.Stdout), &got); err != nil {
				t.Fatalf("%s:%d: no result (exit %d): %v\n%s", guestDocs, ex.line, inv.ExitCode, err, inv.Stderr)
			}
			want := any(map[string]any{"status": "ok"})
			if ex.want != nil {
				if err := json.Unmarshal(ex.want, &want); err != nil {
					t.Fatalf("%s:%d: the result block is not JSON: %v", guestDocs, ex.line, err)
				}
			}
			if where := mismatch(got, want, "result"); where != "" {
				t.Errorf("%s:%d: %s\nresult: %s", guestDocs, ex.line, where, inv.Stdout)
			}
		})
	}
}

// readDocExamples finds the fenced blocks whose info string has the word
// runnable: "```LANG runnable FLAG...", each FLAG "--name=value", "--name"
// or a bare argument; blocks "```LANG file=PATH" just before one are its
// other files.
func readDocExamples(t *testing.T, path string) []docExample {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var (
		out     []docExample
		cur     *docExample
		inBlock bool
		isWant  bool
		file    string
		files   map[string]string
		body    strings.Builder
	)
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if !inBlock {
			info, ok := strings.CutPrefix(line, "```")
			if !ok {
				continue
			}
			inBlock, isWant, file = true, false, ""
			body.Reset()
			words := strings.Fields(info)
			switch {
			case len(words) == 2 && strings.HasPrefix(words[1], "file="):
				file, cur = strings.TrimPrefix(words[1], "file="), nil
			case len(words) >= 2 && words[1] == "runnable":
				ex := docExample{line: n, lang: words[0], files: files}
				files = nil
				for _, w := range words[2:] {
					name, value, hasValue := strings.Cut(w, "=")
					ex.flags = append(ex.flags, name)
					if hasValue {
						ex.flags = append(ex.flags, value)
					}
				}
				out = append(out, ex)
				cur = &out[len(out)-1]
			case len(words) == 2 && words[0] == "json" && words[1] == "result" && cur != nil && cur.want == nil:
				isWant = true
			default:
				cur, files = nil, nil
			}
			continue
		}
		if strings.HasPrefix(line, "```") {
			inBlock = false
			if file != "" {
				if files == nil {
					files = map[string]string{}
				}
				files[file] = body.String()
			} else if cur != nil {
				if isWant {
					cur.want = json.RawMessage(body.String())
					cur = nil
				} else {
					cur.source = body.String()
				}
			}
			continue
		}
		body.WriteString(line)
		body.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// mismatch says where got lacks what want has ("" when it has it all):
// an object's members are checked for those want names, an array's
// elements one for one, anything else for equality.
func mismatch(got, want any, at string) string {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return fmt.Sprintf("%s is %v, want an object", at, got)
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				return fmt.Sprintf("%s has no %s", at, k)
			}
			if where := mismatch(gv, wv, at+"."+k); where != "" {
				return where
			}
		}
		return ""
	case []any:
		g, ok := got.([]any)
		if !ok || len(g) != len(w) {
			return fmt.Sprintf("%s is %v, want %d elements", at, got, len(w))
		}
		for i := range w {
			if where := mismatch(g[i], w[i], fmt.Sprintf("%s[%d]", at, i)); where != "" {
				return where
			}
		}
		return ""
	}
	if !reflect.DeepEqual(got, want) {
		return fmt.Sprintf("%s is %#v, want %#v", at, got, want)
	}
	return ""
}

// TestReadDocExamples: what the runner takes from a page.
func TestReadDocExamples(t *testing.T) {
	page := "text\n\n```js\nnot run\n```\n\n```ts file=lib/util.ts\nexport const x = 1;\n```\n\n" +
		"```ts runnable --entry=main.ts {{DIR}} --env=A=B\nimport { x } from \"./lib/util.ts\";\n```\n\n```json result\n{\"status\": \"ok\"}\n```\n\n" +
		"```py runnable\nprint(1)\n```\n\n```json result\n{\"value\": 1}\n```\n\n```json result\n{\"ignored\": true}\n```\n"
	path := filepath.Join(t.TempDir(), "page.md")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	got := readDocExamples(t, path)
	want := []docExample{
		{line: 11, lang: "ts", flags: []string{"--entry", "main.ts", "{{DIR}}", "--env", "A=B"}, source: "import { x } from \"./lib/util.ts\";\n",
			want: json.RawMessage("{\"status\": \"ok\"}\n"), files: map[string]string{"lib/util.ts": "export const x = 1;\n"}},
		{line: 19, lang: "py", source: "print(1)\n", want: json.RawMessage("{\"value\": 1}\n")},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("examples\n got %+v\nwant %+v", got, want)
	}
}
