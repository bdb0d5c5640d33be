package packages

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxTarballBytes caps a tarball as fetched or read.
const maxTarballBytes = 64 << 20

// fetchTimeout bounds one registry request.
const fetchTimeout = 2 * time.Minute

// AddTarball adds the npm tarball (.tgz) at path, as npm pack makes it:
// its package.json names the package and its exact version.
func (s *Store) AddTarball(path string) (Entry, error) {
	data, err := readCapped(path, maxTarballBytes)
	if err != nil {
		return Entry{}, err
	}
	return s.addTarball(data, path, nil)
}

// AddNPM fetches ref from the registry and adds it: the version's metadata
// gives the tarball and its sha512 integrity, which the tarball must match.
// Only the operator's command calls it; a job never reaches a registry.
func (s *Store) AddNPM(ctx context.Context, ref Ref) (Entry, error) {
	if err := ref.check(); err != nil {
		return Entry{}, err
	}
	if ref.Kind != NPM {
		return Entry{}, fmt.Errorf("%w %s: only npm packages are fetched; add a wheel from its file", ErrInvalidRef, ref)
	}
	reg := strings.TrimSuffix(s.Registry, "/")
	if reg == "" {
		reg = DefaultRegistry
	}
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	metaURL := reg + "/" + strings.Replace(ref.Name, "/", "%2f", 1) + "/" + ref.Version
	body, err := fetch(ctx, metaURL, 8<<20)
	if err != nil {
		return Entry{}, fmt.Errorf("fetch %s: %w", ref, err)
	}
	var meta struct {
		Name    string `json:"name"`
		Version string `json:"version"`
		Dist    struct {
			Tarball   string `json:"tarball"`
			Integrity string `json:"integrity"`
		} `json:"dist"`
	}
	if err := json.Unmarshal(body, &meta); err != nil {
		return Entry{}, fmt.Errorf("fetch %s: metadata: %w", ref, err)
	}
	if meta.Name != ref.Name || meta.Version != ref.Version {
		return Entry{}, fmt.Errorf("fetch %s: the registry answered for %s@%s", ref, meta.Name, meta.Version)
	}
	if !strings.HasPrefix(meta.Dist.Integrity, "sha512-") {
		return Entry{}, fmt.Errorf("%w: %s: the registry gives no sha512 integrity (%q)", ErrRefused, ref, meta.Dist.Integrity)
	}
	if !strings.HasPrefix(meta.Dist.Tarball, "https://") && !strings.HasPrefix(meta.Dist.Tarball, reg+"/") {
		return Entry{}, fmt.Errorf("%w: %s: tarball %q is neither https nor on the registry", ErrRefused, ref, meta.Dist.Tarball)
	}
	tgz, err := fetch(ctx, meta.Dist.Tarball, maxTarballBytes)
	if err != nil {
		return Entry{}, fmt.Errorf("fetch %s: %w", ref, err)
	}
	if got := integrity(tgz); got != meta.Dist.Integrity {
		return Entry{}, fmt.Errorf("%w: %s: tarball integrity %s does not match the registry's %s", ErrRefused, ref, got, meta.Dist.Integrity)
	}
	return s.addTarball(tgz, metaURL, &ref)
}

func fetch(ctx context.Context, u string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json, application/octet-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", u, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("GET %s: more than %d bytes", u, limit)
	}
	return data, nil
}

func readCapped(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: %s is larger than %d bytes", ErrRefused, path, limit)
	}
	return data, nil
}

// addTarball unpacks an npm tarball (its one top directory stripped, as
// npm does) and adds it under the name and version of its package.json,
// which must be want's when given. Only regular files are taken: npm
// itself installs no links or devices from a tarball.
func (s *Store) addTarball(tgz []byte, source string, want *Ref) (Entry, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %s is not a gzipped npm tarball: %w", ErrRefused, source, err)
	}
	u, work, err := s.newUnpacker()
	if err != nil {
		return Entry{}, err
	}
	defer removeSealed(work)
	tr := tar.NewReader(zr)
	var manifest []byte
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %s: %w", ErrRefused, source, err)
		}
		if h.Typeflag != tar.TypeReg {
			continue
		}
		_, name, ok := strings.Cut(strings.TrimPrefix(h.Name, "./"), "/")
		if !ok {
			return Entry{}, fmt.Errorf("%w: %s: %q is outside the tarball's package directory", ErrRefused, source, h.Name)
		}
		if h.Size > maxPackageBytes {
			return Entry{}, fmt.Errorf("%w: %s: %s is larger than %d bytes", ErrRefused, source, h.Name, maxPackageBytes)
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %s: %w", ErrRefused, source, err)
		}
		if err := u.write(name, data); err != nil {
			return Entry{}, fmt.Errorf("%s: %w", source, err)
		}
		if name == "package.json" {
			manifest = data
		}
	}
	if manifest == nil {
		return Entry{}, fmt.Errorf("%w: %s has no package/package.json", ErrRefused, source)
	}
	var pj struct {
		Name         string            `json:"name"`
		Version      string            `json:"version"`
		Dependencies map[string]string `json:"dependencies"`
	}
	if err := json.Unmarshal(manifest, &pj); err != nil {
		return Entry{}, fmt.Errorf("%w: %s: package.json: %w", ErrRefused, source, err)
	}
	ref := Ref{Kind: NPM, Name: pj.Name, Version: pj.Version}
	if err := ref.check(); err != nil {
		return Entry{}, fmt.Errorf("%s: package.json: %w", source, err)
	}
	if want != nil && ref != *want {
		return Entry{}, fmt.Errorf("%w: %s holds %s, not %s", ErrRefused, source, ref, *want)
	}
	// No dependency is fetched: each must be in the store already, at a
	// version its range takes, so the store holds the whole closure.
	stored, err := s.List()
	if err != nil {
		return Entry{}, err
	}
	var missing []string
	for _, name := range sortedKeys(pj.Dependencies) {
		if _, ok := pick(stored, name, pj.Dependencies[name]); !ok {
			missing = append(missing, name+"@"+pj.Dependencies[name])
		}
	}
	if len(missing) > 0 {
		return Entry{}, fmt.Errorf("%w: %s depends on %s, not in the store: add each dependency first (exact versions)", ErrRefused, ref, strings.Join(missing, ", "))
	}
	if err := u.seal(); err != nil {
		return Entry{}, err
	}
	e := Entry{Ref: ref, Integrity: integrity(tgz), Dependencies: pj.Dependencies, Source: source}
	if err := s.commit(u.root, e); err != nil {
		return Entry{}, fmt.Errorf("add %s: %w", ref, err)
	}
	return e, nil
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// pick returns the highest stored npm version of name that spec takes.
// The ranges understood are those npm writes itself: an exact version,
// ^X.Y.Z, ~X.Y.Z, * and the empty string; any other is never satisfied,
// so such a package is refused with the dependency named.
func pick(stored []Entry, name, spec string) (Entry, bool) {
	var best Entry
	found := false
	for _, e := range stored {
		if e.Ref.Kind != NPM || e.Ref.Name != name || !satisfies(e.Ref.Version, spec) {
			continue
		}
		if !found || compareVersions(e.Ref.Version, best.Ref.Version) > 0 {
			best, found = e, true
		}
	}
	return best, found
}

func satisfies(version, spec string) bool {
	v, ok := parseVersion(version)
	if !ok {
		return false
	}
	spec = strings.TrimSpace(spec)
	if spec == "" || spec == "*" {
		return v.pre == ""
	}
	op := spec[0]
	if op == '^' || op == '~' || op == '=' {
		spec = spec[1:]
	}
	lo, ok := parseVersion(spec)
	if !ok {
		return false
	}
	if op != '^' && op != '~' {
		return compareVersions(version, spec) == 0
	}
	if compareVersions(version, spec) < 0 || (v.pre != "" && (v.n != lo.n)) {
		return false
	}
	switch {
	case op == '~':
		return v.n[0] == lo.n[0] && v.n[1] == lo.n[1]
	case lo.n[0] > 0:
		return v.n[0] == lo.n[0]
	case lo.n[1] > 0:
		return v.n[0] == 0 && v.n[1] == lo.n[1]
	default:
		return v.n == lo.n
	}
}

type semver struct {
	n   [3]int
	pre string
}

func parseVersion(s string) (semver, bool) {
	if !npmVersion().MatchString(s) {
		return semver{}, false
	}
	s, _, _ = strings.Cut(s, "+")
	core, pre, _ := strings.Cut(s, "-")
	var v semver
	for i, p := range strings.SplitN(core, ".", 3) {
		n, err := strconv.Atoi(p)
		if err != nil {
			return semver{}, false
		}
		v.n[i] = n
	}
	v.pre = pre
	return v, true
}

// compareVersions orders two exact versions; a pre-release sorts before
// its release (pre-releases among themselves by text).
func compareVersions(a, b string) int {
	va, _ := parseVersion(a)
	vb, _ := parseVersion(b)
	for i := range va.n {
		if c := va.n[i] - vb.n[i]; c != 0 {
			return c
		}
	}
	switch {
	case va.pre == vb.pre:
		return 0
	case va.pre == "":
		return 1
	case vb.pre == "":
		return -1
	}
	return strings.Compare(va.pre, vb.pre)
}
