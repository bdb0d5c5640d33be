package packages_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/pmjail/pmjail/internal/pkgtest"
	"github.com/pmjail/pmjail/packages"
)

func writeTemp(t *testing.T, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func tgz(t *testing.T, name, version string, deps map[string]string) string {
	t.Helper()
	m := map[string]any{"name": name, "version": version, "main": "index.js"}
	if deps != nil {
		m["dependencies"] = deps
	}
	return writeTemp(t, strings.ReplaceAll(name, "/", "-")+"-"+version+".tgz", pkgtest.Tarball(m, map[string]string{"index.js": "module.exports = 1;\n"}))
}

func mustRef(t *testing.T, s string) packages.Ref {
	t.Helper()
	r, err := packages.ParseRef(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestParseRefExactOnly(t *testing.T) {
	for _, ok := range []string{"npm:zod@3.23.8", "npm:@scope/x@1.0.0-rc.1", "py:My.Pkg@1.0", "py:x@2.3.1.post1"} {
		if _, err := packages.ParseRef(ok); err != nil {
			t.Errorf("ParseRef(%q): %v", ok, err)
		}
	}
	for in, want := range map[string]string{
		"npm:zod":          `invalid package reference "npm:zod": no version; pin an exact one (npm:zod@X.Y.Z)`,
		"npm:zod@^3.23.8":  `invalid package reference "npm:zod@^3.23.8": version "^3.23.8" is not exact; pin one version (X.Y.Z), not a range or a tag`,
		"npm:zod@latest":   `invalid package reference "npm:zod@latest": version "latest" is not exact; pin one version (X.Y.Z), not a range or a tag`,
		"npm:Zod@1.0.0":    `invalid package reference "npm:Zod@1.0.0": "Zod" is not an npm package name`,
		"py:x@>=1":         `invalid package reference "py:x@>=1": version ">=1" is not exact; pin one version (1.0, 2.3.1), not a range`,
		"jsr:@std/x@1.0.0": `invalid package reference "jsr:@std/x@1.0.0": want npm:NAME@X.Y.Z or py:NAME@VERSION`,
	} {
		_, err := packages.ParseRef(in)
		if err == nil || err.Error() != want {
			t.Errorf("ParseRef(%q) = %v, want %s", in, err, want)
		}
	}
}

func TestAddListRemove(t *testing.T) {
	s := &packages.Store{Dir: t.TempDir()}
	e, err := s.AddFile(tgz(t, "@acme/left", "1.2.3", nil))
	if err != nil {
		t.Fatal(err)
	}
	if e.Ref.String() != "npm:@acme/left@1.2.3" || !strings.HasPrefix(e.Integrity, "sha512-") {
		t.Fatalf("added %+v", e)
	}
	if _, err := s.AddFile(tgz(t, "@acme/left", "1.2.3", nil)); !errors.Is(err, packages.ErrRefused) {
		t.Fatalf("second add: %v, want ErrRefused", err)
	}
	whl := writeTemp(t, "My_Pkg-1.0-py3-none-any.whl", pkgtest.Wheel("My_Pkg", "1.0", true, map[string]string{"my_pkg/__init__.py": "X = 1\n"}))
	if _, err := s.AddFile(whl); err != nil {
		t.Fatal(err)
	}
	list, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range list {
		got = append(got, e.Ref.String())
	}
	if strings.Join(got, " ") != "npm:@acme/left@1.2.3 py:my_pkg@1.0" {
		t.Fatalf("list = %v", got)
	}
	// Read-only: files 0444, directories 0555.
	st, err := os.Stat(filepath.Join(s.Dir, "npm", "@acme", "left", "1.2.3", "index.js"))
	if err != nil || st.Mode().Perm() != 0o444 {
		t.Fatalf("stored file: %v %v", st.Mode(), err)
	}
	st, err = os.Stat(filepath.Join(s.Dir, "py", "my_pkg", "1.0", "my_pkg"))
	if err != nil || st.Mode().Perm() != 0o555 {
		t.Fatalf("stored directory: %v %v", st.Mode(), err)
	}
	if err := s.Remove(mustRef(t, "npm:@acme/left@1.2.3")); err != nil {
		t.Fatal(err)
	}
	if err := s.Remove(mustRef(t, "npm:@acme/left@1.2.3")); !errors.Is(err, packages.ErrNotFound) {
		t.Fatalf("second remove: %v", err)
	}
	if _, err := os.Stat(filepath.Join(s.Dir, "npm", "@acme", "left", "1.2.3")); !os.IsNotExist(err) {
		t.Fatalf("files left after remove: %v", err)
	}
}

func TestDependenciesMustBeStored(t *testing.T) {
	s := &packages.Store{Dir: t.TempDir()}
	_, err := s.AddFile(tgz(t, "app", "1.0.0", map[string]string{"dep": "^2.1.0", "other": "1.0.0"}))
	want := "package refused: npm:app@1.0.0 depends on dep@^2.1.0, other@1.0.0, not in the store: add each dependency first (exact versions)"
	if err == nil || err.Error() != want {
		t.Fatalf("add with missing dependencies: %v\nwant %s", err, want)
	}
	for _, p := range []string{tgz(t, "dep", "2.0.0", nil), tgz(t, "dep", "2.4.1", nil), tgz(t, "dep", "3.0.0", nil), tgz(t, "other", "1.0.0", nil)} {
		if _, err := s.AddFile(p); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.AddFile(tgz(t, "app", "1.0.0", map[string]string{"dep": "^2.1.0", "other": "1.0.0"})); err != nil {
		t.Fatal(err)
	}
	// The view holds app and the dependencies it resolves to: dep 2.4.1
	// (^2.1.0's highest), not 2.0.0 or 3.0.0.
	view, err := s.View([]packages.Ref{mustRef(t, "npm:app@1.0.0")})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]bool{"app/1.0.0": true, "dep/2.4.1": true, "other/1.0.0": true, "dep/2.0.0": false, "dep/3.0.0": false} {
		_, err := os.Stat(filepath.Join(view, packages.ViewNPM, p, "package.json"))
		if (err == nil) != want {
			t.Errorf("view has %s: %v, want %v", p, err == nil, want)
		}
	}
	meta, err := os.ReadFile(filepath.Join(view, packages.ViewNPM, "dep", "registry.json"))
	if err != nil || strings.Contains(string(meta), "3.0.0") || !strings.Contains(string(meta), `"2.4.1"`) {
		t.Fatalf("dep's registry.json: %s %v", meta, err)
	}
	err = s.Remove(mustRef(t, "npm:dep@2.4.1"))
	if err == nil || err.Error() != "package refused: npm:app@1.0.0 depends on dep@^2.1.0, which only npm:dep@2.4.1 satisfies: remove npm:app@1.0.0 first" {
		t.Fatalf("remove a needed dependency: %v", err)
	}
}

func TestRefusesUnsafeOrImpureArchives(t *testing.T) {
	s := &packages.Store{Dir: t.TempDir()}
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, f := range []struct{ name, data string }{{"package/package.json", `{"name":"evil","version":"1.0.0"}`}, {"package/../../escape.js", "x"}} {
		_ = tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg})
		_, _ = tw.Write([]byte(f.data))
	}
	tw.Close()
	zw.Close()
	_, err := s.AddFile(writeTemp(t, "evil-1.0.0.tgz", buf.Bytes()))
	if !errors.Is(err, packages.ErrRefused) || !strings.Contains(err.Error(), `unsafe path "../../escape.js"`) {
		t.Fatalf("tarball with ..: %v", err)
	}

	_, err = s.AddFile(writeTemp(t, "fast-1.0-cp312-cp312-linux_x86_64.whl", pkgtest.Wheel("fast", "1.0", false, nil)))
	want := "package refused: fast-1.0-cp312-cp312-linux_x86_64.whl is not a pure-Python wheel (abi cp312, platform linux_x86_64; want none and any): Pyodide cannot load native code from the store"
	if err == nil || err.Error() != want {
		t.Fatalf("native wheel: %v", err)
	}
	_, err = s.AddFile(writeTemp(t, "liar-1.0-py3-none-any.whl", pkgtest.Wheel("liar", "1.0", false, nil)))
	want = "package refused: liar-1.0-py3-none-any.whl is not a pure-Python wheel (its WHEEL file lacks Root-Is-Purelib: true)"
	if err == nil || err.Error() != want {
		t.Fatalf("impure wheel: %v", err)
	}
	_, err = s.AddFile(writeTemp(t, "x.zip", []byte("PK")))
	if err == nil || !strings.HasSuffix(err.Error(), "x.zip: want an npm tarball (.tgz) or a wheel (.whl)") {
		t.Fatalf("other file: %v", err)
	}
	if list, _ := s.List(); len(list) != 0 {
		t.Fatalf("refused packages stored: %v", list)
	}
	if left, _ := filepath.Glob(filepath.Join(s.Dir, ".add-*")); len(left) != 0 {
		t.Fatalf("work directories left: %v", left)
	}
}

// A registry on a local port, serving what npm's does for one version.
func TestAddNPMChecksIntegrity(t *testing.T) {
	good := pkgtest.Tarball(map[string]any{"name": "tiny", "version": "1.0.0"}, map[string]string{"index.js": "export default 1;\n"})
	tampered := pkgtest.Tarball(map[string]any{"name": "tiny", "version": "1.0.0"}, map[string]string{"index.js": "export default 2;\n"})
	serve := good
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/tiny/1.0.0":
			w.Write([]byte(`{"name":"tiny","version":"1.0.0","dist":{"tarball":"` + srv.URL + `/tiny/-/tiny-1.0.0.tgz","integrity":"` + integrityOf(good) + `"}}`))
		case "/tiny/-/tiny-1.0.0.tgz":
			w.Write(serve)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	s := &packages.Store{Dir: t.TempDir(), Registry: srv.URL}
	ctx := context.Background()

	serve = tampered
	_, err := s.AddNPM(ctx, mustRef(t, "npm:tiny@1.0.0"))
	if !errors.Is(err, packages.ErrRefused) || !strings.Contains(err.Error(), "does not match the registry's "+integrityOf(good)) {
		t.Fatalf("tampered tarball: %v", err)
	}
	serve = good
	e, err := s.AddNPM(ctx, mustRef(t, "npm:tiny@1.0.0"))
	if err != nil || e.Integrity != integrityOf(good) {
		t.Fatalf("AddNPM: %+v %v", e, err)
	}
	if _, err := s.AddNPM(ctx, mustRef(t, "npm:tiny@2.0.0")); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("missing version: %v", err)
	}
}

func integrityOf(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

func TestScan(t *testing.T) {
	src := `import a from "npm:left@1.0.0";
import { b } from 'npm:@acme/right@2.0.0/sub/path.js';
export * from "npm:left@1.0.0";
const c = await import("npm:" + name);
const d = await import(` + "`npm:left@${v}`" + `);`
	refs, err := packages.Scan(src)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 || refs[0].String() != "npm:left@1.0.0" || refs[1].String() != "npm:@acme/right@2.0.0" {
		t.Fatalf("Scan = %v", refs)
	}
	for src, want := range map[string]string{
		`import "npm:left";`:        `invalid package reference "npm:left": no version; pin an exact one (npm:left@X.Y.Z)`,
		`import "npm:left@^1.0.0";`: `invalid package reference "npm:left@^1.0.0": version "^1.0.0" is not exact; pin one version (X.Y.Z), not a range or a tag`,
		`import "jsr:@std/path@1";`: `package not allowed: jsr:@std/path@1: jsr: packages are not supported; use the npm: form of a vetted package`,
	} {
		if _, err := packages.Scan(src); err == nil || err.Error() != want {
			t.Errorf("Scan(%s) = %v\nwant %s", src, err, want)
		}
	}
	allowed := []packages.Ref{mustRef(t, "npm:left@1.0.0")}
	if err := packages.Allowed(refs[:1], allowed); err != nil {
		t.Fatal(err)
	}
	if err := packages.Allowed([]packages.Ref{mustRef(t, "npm:left@1.0.1")}, allowed); err == nil || err.Error() != "package not allowed: npm:left@1.0.1: this version is not allowed (allowed: npm:left@1.0.0)" {
		t.Fatalf("other version: %v", err)
	}
	if err := packages.Allowed(refs[1:], allowed); err == nil || err.Error() != "package not allowed: npm:@acme/right@2.0.0 is not among the packages jobs may use here" {
		t.Fatalf("unlisted: %v", err)
	}
}

// The jail reads a view as an unprivileged id: an operator's tight umask
// must not make the store unreadable to it.
func TestModesWhateverTheUmask(t *testing.T) {
	old := syscall.Umask(0o077)
	defer syscall.Umask(old)
	s := &packages.Store{Dir: filepath.Join(t.TempDir(), "store")}
	if _, err := s.AddFile(tgz(t, "@acme/left", "1.2.3", nil)); err != nil {
		t.Fatal(err)
	}
	view, err := s.View([]packages.Ref{mustRef(t, "npm:@acme/left@1.2.3")})
	if err != nil {
		t.Fatal(err)
	}
	for p, want := range map[string]os.FileMode{
		s.Dir:                                0o755,
		filepath.Dir(view):                   0o755,
		view:                                 0o555,
		filepath.Join(s.Dir, "npm", "@acme"): 0o755,
		filepath.Join(view, packages.ViewNPM, "@acme", "left", "registry.json"):     0o444,
		filepath.Join(view, packages.ViewNPM, "@acme", "left", "1.2.3", "index.js"): 0o444,
	} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != want {
			t.Errorf("%s: %v %v, want %o", p, st.Mode().Perm(), err, want)
		}
	}
}
