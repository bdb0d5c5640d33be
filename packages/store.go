package packages

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotFound is returned for a package that is not in the store.
var ErrNotFound = errors.New("package not in the store")

// ErrRefused is returned for a package the store will not take: not an
// npm tarball or a pure-Python wheel, unsafe paths, too large, or with
// dependencies the store cannot satisfy.
var ErrRefused = errors.New("package refused")

// Caps on one package, unpacked: a vetted package is a library, not a
// data set.
const (
	maxPackageBytes = 256 << 20
	maxPackageFiles = 20000
)

// Store is the package store below Dir (a state directory's packages/).
// Each package lives unpacked, read-only, in Dir/KIND/NAME/VERSION, and is
// in the store once its index entry, written last, is there.
type Store struct {
	Dir string
	// Registry is the npm registry AddNPM fetches from (default
	// DefaultRegistry).
	Registry string
}

// DefaultRegistry is the public npm registry.
const DefaultRegistry = "https://registry.npmjs.org"

// EnvDir names the setting that puts the store elsewhere than the state
// directory's packages/ (a test's own store, a store shared by builds).
const EnvDir = "PMJAIL_PACKAGES_DIR"

// Open returns the store in the state directory stateDir, or at
// $PMJAIL_PACKAGES_DIR. It creates nothing: an absent store is an empty
// one.
func Open(stateDir string) *Store {
	if dir := os.Getenv(EnvDir); dir != "" {
		return &Store{Dir: dir}
	}
	return &Store{Dir: filepath.Join(stateDir, "packages")}
}

// Entry is one stored package as its index entry records it.
type Entry struct {
	Ref Ref `json:"-"`
	// Integrity is the sha512 of the file the package came from, in the
	// form npm's metadata uses (sha512-BASE64).
	Integrity string `json:"integrity"`
	// Dependencies are an npm package's, as its package.json gives them.
	Dependencies map[string]string `json:"dependencies,omitempty"`
	// Source is where the operator added it from.
	Source string `json:"source"`
}

type indexFile struct {
	Ref string `json:"ref"`
	Entry
}

func (s *Store) indexPath(r Ref) string {
	return filepath.Join(s.Dir, "index", r.Kind+"-"+url.PathEscape(r.Name)+"@"+r.Version+".json")
}

func (s *Store) filesDir(r Ref) string {
	return filepath.Join(s.Dir, r.Kind, filepath.FromSlash(r.Name), r.Version)
}

// List returns every stored package, sorted by reference.
func (s *Store) List() ([]Entry, error) {
	names, err := filepath.Glob(filepath.Join(s.Dir, "index", "*.json"))
	if err != nil {
		return nil, err
	}
	var out []Entry
	for _, n := range names {
		data, err := os.ReadFile(n)
		if err != nil {
			return nil, fmt.Errorf("package store: %w", err)
		}
		var f indexFile
		if err := json.Unmarshal(data, &f); err != nil {
			return nil, fmt.Errorf("package store: %s: %w", n, err)
		}
		if f.Entry.Ref, err = ParseRef(f.Ref); err != nil {
			return nil, fmt.Errorf("package store: %s: %w", n, err)
		}
		out = append(out, f.Entry)
	}
	slices.SortFunc(out, func(a, b Entry) int { return strings.Compare(a.Ref.String(), b.Ref.String()) })
	return out, nil
}

// Get returns the stored entry for r, or an error wrapping ErrNotFound.
func (s *Store) Get(r Ref) (Entry, error) {
	data, err := os.ReadFile(s.indexPath(r))
	if errors.Is(err, fs.ErrNotExist) {
		return Entry{}, fmt.Errorf("%w: %s", ErrNotFound, r)
	}
	if err != nil {
		return Entry{}, fmt.Errorf("package store: %w", err)
	}
	var f indexFile
	if err := json.Unmarshal(data, &f); err != nil {
		return Entry{}, fmt.Errorf("package store: %s: %w", r, err)
	}
	f.Entry.Ref = r
	return f.Entry, nil
}

// Remove takes r out of the store. It refuses while another stored
// package depends on r and no other stored version satisfies it.
func (s *Store) Remove(r Ref) error {
	if _, err := s.Get(r); err != nil {
		return err
	}
	all, err := s.List()
	if err != nil {
		return err
	}
	if r.Kind == NPM {
		rest := slices.DeleteFunc(slices.Clone(all), func(e Entry) bool { return e.Ref == r })
		for _, e := range rest {
			if spec, ok := e.Dependencies[r.Name]; ok {
				if _, ok := pick(rest, r.Name, spec); !ok {
					return fmt.Errorf("%w: %s depends on %s@%s, which only %s satisfies: remove %s first", ErrRefused, e.Ref, r.Name, spec, r, e.Ref)
				}
			}
		}
	}
	// The index entry first: from then on the package is not in the store.
	if err := os.Remove(s.indexPath(r)); err != nil {
		return fmt.Errorf("remove %s: %w", r, err)
	}
	if err := removeSealed(s.filesDir(r)); err != nil {
		return fmt.Errorf("remove %s: %w", r, err)
	}
	// Views holding it go too; a run that bound one keeps its mount.
	return s.pruneViews("")
}

// commit moves the unpacked tree tmp into place for e and writes its index
// entry, the step that makes it part of the store.
func (s *Store) commit(tmp string, e Entry) error {
	if _, err := s.Get(e.Ref); err == nil {
		return fmt.Errorf("%w: %s is in the store already (remove it first)", ErrRefused, e.Ref)
	}
	dst := s.filesDir(e.Ref)
	if err := s.mkdir(filepath.Dir(dst)); err != nil {
		return err
	}
	// Leftovers of an add that died before its index entry.
	if err := removeSealed(dst); err != nil {
		return err
	}
	if err := os.Rename(tmp, dst); err != nil {
		return err
	}
	data, err := json.MarshalIndent(indexFile{Ref: e.Ref.String(), Entry: e}, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(s.indexPath(e.Ref), data)
}

// workDir is a fresh directory in the store for unpacking into; the
// caller removes it (a rename moved it away on success).
func (s *Store) workDir() (string, error) {
	if err := s.mkdir(s.Dir); err != nil {
		return "", fmt.Errorf("package store: %w", err)
	}
	return os.MkdirTemp(s.Dir, ".add-")
}

// mkdir makes dir and the directories up to the store's own, whatever
// the operator's umask, 0755: the jail opens a view as an unprivileged id.
func (s *Store) mkdir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if err := os.Chmod(d, 0o755); err != nil {
			return err
		}
		if d == s.Dir || !strings.HasPrefix(d, s.Dir+string(filepath.Separator)) {
			return nil
		}
	}
}

// writeFile writes a file read-only for all, whatever the umask.
func writeFile(path string, data []byte) error {
	if err := os.WriteFile(path, data, 0o444); err != nil {
		return err
	}
	return os.Chmod(path, 0o444)
}

func writeAtomic(path string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := writeReadOnly(f, data); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// writeReadOnly writes data to f, makes it read-only whatever the umask
// (what the store keeps is never changed in place; a guest reads it
// through a view) and closes it, on every path.
func writeReadOnly(f *os.File, data []byte) error {
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Chmod(0o444); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// integrity is data's sha512 as npm spells it.
func integrity(data []byte) string {
	sum := sha512.Sum512(data)
	return "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
}

// newUnpacker makes a work directory, which the caller removes
// (removeSealed), and an unpacker into its pkg/.
func (s *Store) newUnpacker() (*unpacker, string, error) {
	work, err := s.workDir()
	if err != nil {
		return nil, "", err
	}
	u := &unpacker{root: work + "/pkg"}
	if err := u.mkdir(u.root); err != nil {
		removeSealed(work)
		return nil, "", err
	}
	return u, work, nil
}

// unpacker writes one package's files below root, checking every path and
// the caps; files are read-only, directories not writable.
type unpacker struct {
	root  string
	files int
	bytes int64
}

func (u *unpacker) write(name string, data []byte) error {
	rel, err := safePath(name)
	if err != nil {
		return err
	}
	u.files++
	u.bytes += int64(len(data))
	if u.files > maxPackageFiles || u.bytes > maxPackageBytes {
		return fmt.Errorf("%w: more than %d files or %d bytes unpacked", ErrRefused, maxPackageFiles, maxPackageBytes)
	}
	p := filepath.Join(u.root, rel)
	if err := u.mkdir(filepath.Dir(p)); err != nil {
		return err
	}
	// O_EXCL: a name twice in one archive is refused, not overwritten.
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrRefused, name, err)
	}
	return writeReadOnly(f, data)
}

func (u *unpacker) mkdir(p string) error {
	return os.MkdirAll(p, 0o755)
}

// seal makes the tree's directories read-only (files are already).
func (u *unpacker) seal() error {
	return filepath.WalkDir(u.root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return os.Chmod(p, 0o555)
		}
		return nil
	})
}

// safePath is an archive member's name as a relative path that stays
// below the package's root, or an error naming it.
func safePath(name string) (string, error) {
	clean := filepath.Clean(filepath.FromSlash(name))
	if name == "" || filepath.IsAbs(name) || strings.HasPrefix(name, "/") || clean == "." || clean == ".." || strings.HasPrefix(clean, ".."+string(filepath.Separator)) || strings.ContainsRune(name, 0) || strings.Contains(name, "\\") {
		return "", fmt.Errorf("%w: unsafe path %q in the archive", ErrRefused, name)
	}
	return clean, nil
}

// viewKey names a set of entries' view.
func viewKey(entries []Entry) string {
	h := sha256.New()
	for _, e := range entries {
		fmt.Fprintf(h, "%s %s\n", e.Ref, e.Integrity)
	}
	return hex.EncodeToString(h.Sum(nil))[:16]
}

// jsonBytes is v as indented JSON.
func jsonBytes(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
	return b.Bytes()
}
