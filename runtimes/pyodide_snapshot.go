package runtimes

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"
)

// ErrNoSnapshot is returned when there is no valid Pyodide memory snapshot:
// none was built, or it was built for other versions, or its bytes do not
// match its sidecar. Python still runs then, from a cold start.
var ErrNoSnapshot = errors.New("no valid pyodide snapshot")

// Snapshot is a Pyodide memory snapshot: the state of a freshly started
// interpreter with the common standard-library modules imported, which a
// run restores instead of starting Python (~0.4 s instead of ~4.5 s).
type Snapshot struct {
	// Path is the snapshot file; Meta is its sidecar's content.
	Path string
	Meta SnapshotMeta
}

// SnapshotMeta is the JSON sidecar beside a snapshot. A snapshot is valid
// only for the Pyodide, Deno, loader and bootstrap it was made with, and
// only with exactly these bytes.
type SnapshotMeta struct {
	PyodideVersion string `json:"pyodide_version"`
	DenoVersion    string `json:"deno_version"`
	// LoaderSHA256 covers the loader and the Python bootstrap it bakes in.
	LoaderSHA256 string    `json:"loader_sha256"`
	SHA256       string    `json:"sha256"`
	Size         int64     `json:"size"`
	Created      time.Time `json:"created"`
	// Identity is the snapshot file's identity when its checksum was taken
	// at build time: a file that still has it is the file that was hashed,
	// so a CLI run does not hash 31 MB again. Any other file (a copied or
	// restored state directory) is hashed before it is used.
	Identity *FileIdentity `json:"identity,omitempty"`
}

// snapshotBuildTimeout bounds the one-off build (a cold start is ~5 s).
const snapshotBuildTimeout = 2 * time.Minute

// verified caches checksum results by file identity, so a run pays for
// hashing 31 MB once per snapshot file, not once per run.
var verified struct {
	sync.Mutex
	m map[verifyKey]bool
}

type verifyKey struct {
	path  string
	size  int64
	mtime time.Time
	id    FileIdentity // zero where the platform has none
	sum   string
}

// packageVersion reads the "version" of an npm package.json.
func packageVersion(file string) (string, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read package version: %w", err)
	}
	var pkg struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(data, &pkg); err != nil || pkg.Version == "" {
		return "", fmt.Errorf("read package version from %s: no version", file)
	}
	return pkg.Version, nil
}

// snapshotWant is the sidecar a valid snapshot of this install must match,
// less its checksum, size and date.
func (in *Install) snapshotWant() (SnapshotMeta, error) {
	pv, err := packageVersion(filepath.Join(in.PyodideDir, "package.json"))
	if err != nil {
		return SnapshotMeta{}, err
	}
	dv, err := packageVersion(filepath.Join(filepath.Dir(in.DenoPath), "package.json"))
	if err != nil {
		return SnapshotMeta{}, err
	}
	// The loader makes the snapshot and the bootstrap is part of it.
	h := sha256.New()
	for _, name := range []string{"pyodide/loader.mjs", "pyodide/bootstrap.py"} {
		data, err := pyodideFS.ReadFile(name)
		if err != nil {
			return SnapshotMeta{}, fmt.Errorf("read embedded %s: %w", name, err)
		}
		fmt.Fprintf(h, "%s %d\n", name, len(data))
		h.Write(data)
	}
	return SnapshotMeta{PyodideVersion: pv, DenoVersion: dv, LoaderSHA256: hex.EncodeToString(h.Sum(nil))}, nil
}

// snapshotPath is where the snapshot for these versions and this loader
// lives. The loader is in the name so that two pmjail builds sharing one
// runtime directory (an upgrade in progress, a second checkout) each keep
// their own instead of rebuilding over each other.
func (in *Install) snapshotPath(want SnapshotMeta) string {
	return filepath.Join(in.StateDir, fmt.Sprintf("pyodide-%s-deno-%s-%.12s.snapshot", want.PyodideVersion, want.DenoVersion, want.LoaderSHA256))
}

// PyodideSnapshot returns the valid snapshot for this install, or an error
// wrapping ErrNoSnapshot that says why there is none. It never builds one.
func (in *Install) PyodideSnapshot() (*Snapshot, error) {
	want, err := in.snapshotWant()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
	}
	path := in.snapshotPath(want)
	data, err := os.ReadFile(path + ".json")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
	}
	var meta SnapshotMeta
	if err := json.Unmarshal(data, &meta); err != nil {
		return nil, fmt.Errorf("%w: sidecar %s: %w", ErrNoSnapshot, path+".json", err)
	}
	switch {
	case meta.PyodideVersion != want.PyodideVersion || meta.DenoVersion != want.DenoVersion:
		return nil, fmt.Errorf("%w: %s was made for pyodide %s and deno %s", ErrNoSnapshot, path, meta.PyodideVersion, meta.DenoVersion)
	case meta.LoaderSHA256 != want.LoaderSHA256:
		return nil, fmt.Errorf("%w: %s was made by another pmjail loader", ErrNoSnapshot, path)
	}
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
	}
	if st.Size() != meta.Size {
		return nil, fmt.Errorf("%w: %s is %d bytes, its sidecar says %d", ErrNoSnapshot, path, st.Size(), meta.Size)
	}
	id, hasID := identityOf(st)
	if hasID && meta.Identity != nil && *meta.Identity == id {
		return &Snapshot{Path: path, Meta: meta}, nil
	}
	key := verifyKey{path: path, size: st.Size(), mtime: st.ModTime(), id: id, sum: meta.SHA256}
	verified.Lock()
	ok, known := verified.m[key]
	verified.Unlock()
	if !known {
		sum, err := fileSHA256(path)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrNoSnapshot, err)
		}
		ok = sum == meta.SHA256
		verified.Lock()
		if verified.m == nil {
			verified.m = make(map[verifyKey]bool)
		}
		verified.m[key] = ok
		verified.Unlock()
	}
	if !ok {
		return nil, fmt.Errorf("%w: %s does not match its sidecar's checksum", ErrNoSnapshot, path)
	}
	return &Snapshot{Path: path, Meta: meta}, nil
}

// PythonStart says how the next Python run starts: "snapshot", or "cold: "
// and the reason there is no valid snapshot.
func (in *Install) PythonStart() string {
	if _, err := in.PyodideSnapshot(); err != nil {
		return "cold: " + err.Error()
	}
	return "snapshot"
}

// EnsurePyodideSnapshot returns the valid snapshot for this install,
// building it first when it is missing or stale. It runs the loader in its
// snapshot mode on Deno with read access to the loader and the Pyodide
// assets and write access to one temporary output file only; no guest code
// is involved. The snapshot and its sidecar are replaced atomically.
func (in *Install) EnsurePyodideSnapshot(ctx context.Context) (*Snapshot, error) {
	if snap, err := in.PyodideSnapshot(); err == nil {
		return snap, nil
	}
	want, err := in.snapshotWant()
	if err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	if err := os.MkdirAll(in.StateDir, 0o755); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	path := in.snapshotPath(want)
	work, err := os.MkdirTemp(in.StateDir, ".snapshot-build-")
	if err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	defer os.RemoveAll(work)

	files, err := pyodideGuestFiles()
	if err != nil {
		return nil, err
	}
	guest := filepath.Join(work, "guest")
	if err := writeGuestDir(guest, files); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	out := filepath.Join(work, "out.snapshot")

	ctx, cancel := context.WithTimeout(ctx, snapshotBuildTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, in.DenoPath, "run",
		"--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm", "--no-check",
		"--allow-read="+guest+","+in.PyodideDir,
		"--allow-write="+out,
		filepath.Join(guest, "loader.mjs"), "snapshot", in.PyodideDir, out)
	cmd.Dir = work
	dieWithParent(cmd)
	cmd.Env = []string{
		"PATH=/nonexistent",
		"HOME=" + work,
		"DENO_DIR=" + filepath.Join(work, "deno"),
		"DENO_NO_UPDATE_CHECK=1",
		"NO_COLOR=1",
	}
	if msg, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: run loader: %w: %s", err, msg)
	}

	sum, err := fileSHA256(out)
	if err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	st, err := os.Stat(out)
	if err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	if err := os.Chmod(out, 0o644); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	// The snapshot first, then its sidecar: a reader that sees the new
	// sidecar sees the new bytes, and one that sees the old sidecar with new
	// bytes finds a mismatch and starts cold.
	if err := os.Rename(out, path); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	meta := want
	meta.SHA256, meta.Size, meta.Created = sum, st.Size(), time.Now().UTC().Truncate(time.Second)
	// The identity after the rename, which moves the change time; hashing
	// again here closes the window between the first hash and the rename.
	if fi, err := os.Stat(path); err == nil {
		if id, ok := identityOf(fi); ok {
			if again, err := fileSHA256(path); err == nil && again == sum {
				meta.Identity = &id
			}
		}
	}
	side, err := json.MarshalIndent(meta, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	sideTmp := filepath.Join(work, "out.json")
	if err := os.WriteFile(sideTmp, append(side, '\n'), 0o644); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	if err := os.Rename(sideTmp, path+".json"); err != nil {
		return nil, fmt.Errorf("build pyodide snapshot: %w", err)
	}
	return in.PyodideSnapshot()
}

// fileSHA256 is the hex SHA-256 of a file's content.
func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("hash %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
