package packages

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// View layout: DENO_DIR-shaped for npm (Deno's global npm cache, which
// --cached-only resolves from), one site-packages tree for Python.
const (
	ViewNPM    = "npm/registry.npmjs.org"
	ViewPython = "python"
)

// View returns a directory holding exactly refs (and, for npm packages,
// the dependencies they resolve to in the store), built once per set and
// kept: Dir/views/KEY, read-only, its files hard links into the store.
// A job's root binds it read-only; a package that is not in it cannot be
// imported there, whatever the job's code computes. No refs, no view: "".
func (s *Store) View(refs []Ref) (string, error) {
	if len(refs) == 0 {
		return "", nil
	}
	stored, err := s.List()
	if err != nil {
		return "", err
	}
	var set []Entry
	seen := map[Ref]bool{}
	var add func(r Ref, by string) error
	add = func(r Ref, by string) error {
		if seen[r] {
			return nil
		}
		i := slices.IndexFunc(stored, func(e Entry) bool { return e.Ref == r })
		if i < 0 {
			return fmt.Errorf("%w: %s%s", ErrNotFound, r, by)
		}
		seen[r] = true
		e := stored[i]
		set = append(set, e)
		for _, name := range sortedKeys(e.Dependencies) {
			dep, ok := pick(stored, name, e.Dependencies[name])
			if !ok {
				return fmt.Errorf("%w: %s@%s (a dependency of %s)", ErrNotFound, name, e.Dependencies[name], r)
			}
			if err := add(dep.Ref, " (a dependency of "+r.String()+")"); err != nil {
				return err
			}
		}
		return nil
	}
	for _, r := range refs {
		if err := add(r, ""); err != nil {
			return "", err
		}
	}
	slices.SortFunc(set, func(a, b Entry) int { return strings.Compare(a.Ref.String(), b.Ref.String()) })
	dir := filepath.Join(s.Dir, "views", viewKey(set))
	if st, err := os.Stat(dir); err == nil && st.IsDir() {
		return dir, nil
	}
	if err := s.mkdir(filepath.Dir(dir)); err != nil {
		return "", err
	}
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".build-")
	if err != nil {
		return "", err
	}
	defer removeSealed(tmp)
	if err := s.buildView(tmp, set); err != nil {
		return "", fmt.Errorf("package view: %w", err)
	}
	if err := seal(tmp); err != nil {
		return "", err
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another supervisor may have built the same set first.
		if st, serr := os.Stat(dir); serr == nil && st.IsDir() {
			return dir, nil
		}
		return "", err
	}
	return dir, nil
}

func (s *Store) buildView(tmp string, set []Entry) error {
	byName := map[string][]Entry{}
	for _, e := range set {
		switch e.Ref.Kind {
		case NPM:
			byName[e.Ref.Name] = append(byName[e.Ref.Name], e)
			dst := filepath.Join(tmp, ViewNPM, filepath.FromSlash(e.Ref.Name), e.Ref.Version)
			if err := linkTree(s.filesDir(e.Ref), dst, false); err != nil {
				return fmt.Errorf("%s: %w", e.Ref, err)
			}
		case Python:
			if err := linkTree(s.filesDir(e.Ref), filepath.Join(tmp, ViewPython), true); err != nil {
				return fmt.Errorf("%s: %w", e.Ref, err)
			}
		}
	}
	if err := writeManifest(tmp); err != nil {
		return err
	}
	// Deno reads a package's registry metadata from its cache before the
	// package: the versions here are all it can ever resolve to.
	for name, entries := range byName {
		versions := map[string]any{}
		latest := ""
		for _, e := range entries {
			deps := e.Dependencies
			if deps == nil {
				deps = map[string]string{}
			}
			versions[e.Ref.Version] = map[string]any{
				"name":         name,
				"version":      e.Ref.Version,
				"dependencies": deps,
				"dist": map[string]string{
					"tarball":   DefaultRegistry + "/" + name + "/-/" + name[strings.LastIndex(name, "/")+1:] + "-" + e.Ref.Version + ".tgz",
					"integrity": e.Integrity,
				},
			}
			if latest == "" || compareVersions(e.Ref.Version, latest) > 0 {
				latest = e.Ref.Version
			}
		}
		meta := map[string]any{"name": name, "dist-tags": map[string]string{"latest": latest}, "versions": versions}
		if err := writeFile(filepath.Join(tmp, ViewNPM, filepath.FromSlash(name), "registry.json"), jsonBytes(meta)); err != nil {
			return err
		}
	}
	return nil
}

// ViewPythonFiles lists the files below ViewPython, as JSON: the Pyodide
// loader copies them into Python's file system by name, for the guest's
// seccomp policy lets no runtime list a directory.
const ViewPythonFiles = ViewPython + ".json"

func writeManifest(view string) error {
	root := filepath.Join(view, ViewPython)
	if _, err := os.Stat(root); err != nil {
		return nil // no wheel in the view
	}
	files := []string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(root, p)
		files = append(files, filepath.ToSlash(rel))
		return err
	})
	if err != nil {
		return err
	}
	return writeFile(filepath.Join(view, ViewPythonFiles), jsonBytes(files))
}

// linkTree hard-links src's files below dst (a copy would do, but the
// store and its views share a file system). With merge, dst may exist and
// only a file both trees hold is an error (two wheels, one module).
func linkTree(src, dst string, merge bool) error {
	if !merge {
		if _, err := os.Lstat(dst); err == nil {
			return fmt.Errorf("%s exists", dst)
		}
	}
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, p)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		case d.Type().IsRegular():
			if err := os.Link(p, target); err != nil {
				if errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("%s: two packages hold this file", rel)
				}
				return err
			}
			return nil
		}
		return fmt.Errorf("%s: not a regular file", rel)
	})
}

// seal makes dir's directories read-only.
func seal(dir string) error { return (&unpacker{root: dir}).seal() }

// pruneViews removes every view but keep; a run that bound one keeps its
// mount.
func (s *Store) pruneViews(keep string) error {
	views, _ := filepath.Glob(filepath.Join(s.Dir, "views", "*"))
	for _, v := range views {
		if filepath.Base(v) == keep {
			continue
		}
		if err := removeSealed(v); err != nil {
			return err
		}
	}
	return nil
}

// removeSealed removes a tree whose directories seal made read-only: for
// an operator who is not root, they must be writable first.
func removeSealed(dir string) error {
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
