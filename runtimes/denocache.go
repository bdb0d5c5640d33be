package runtimes

import (
	"context"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"time"
)

//go:embed denocache.mjs
var compactScript []byte

// ErrNoDenoCache is returned when there is no warm Deno code cache for
// this install; runs then start with an empty DENO_DIR.
var ErrNoDenoCache = errors.New("no warm deno code cache")

// denoDir is DENO_DIR inside a job's root. It is on the run's own /tmp:
// an empty one, or a writable copy of the warm cache.
const denoDir = TmpDir + "/.deno"

// warmHeapBytes is the memory limit the cache is warmed under. V8 checks a
// code cache entry against a hash of its flags, so the heap cap is part of
// the key: the default profile's 256M is the common case (see
// TestDenoCacheFlagKey for what a different cap costs).
const warmHeapBytes = 256 << 20

// denoCacheBuildTimeout bounds the one-off warm run (~1 s from a snapshot).
const denoCacheBuildTimeout = 2 * time.Minute

// DenoCache is a DENO_DIR that Deno's code cache was warmed in by loading
// Pyodide at the in-jail paths: a run that gets a writable view of it
// skips recompiling Pyodide's JavaScript. It is built by the supervisor
// only, holds no guest data, and a guest never writes to it.
type DenoCache struct {
	Dir string
}

// Size is the total size of the cache's files (a walk: for reports, not
// for runs).
func (c *DenoCache) Size() int64 { return dirSize(c.Dir) }

// publishedCache is the cache at dir if it is there. A cache directory
// appears by one rename once complete, so its presence is its validity.
func publishedCache(dir string) (*DenoCache, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDenoCache, err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrNoDenoCache, dir)
	}
	return &DenoCache{Dir: dir}, nil
}

// denoCacheKey names what the cache depends on: Deno, Pyodide, the guest
// files the jail writes (their content is what V8 checks), the snapshot
// the warm run restored and the command line (V8 checks its flags).
func (in *Install) denoCacheKey(snap *Snapshot) (string, error) {
	files, err := pyodideGuestFiles()
	if err != nil {
		return "", err
	}
	// A valid snapshot's versions are this install's (PyodideSnapshot checked).
	h := sha256.New()
	fmt.Fprintf(h, "deno %s\npyodide %s\nsnapshot %s\nargs %q\n", snap.Meta.DenoVersion, snap.Meta.PyodideVersion, snap.Meta.SHA256, pythonArgs(warmHeapBytes, true, "warm", snapshotTarget))
	for _, f := range files {
		sum := sha256.Sum256(f.Data)
		fmt.Fprintf(h, "%s %x\n", f.Path, sum)
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// pyodideCachePrefix names Pyodide's warm caches in the state directory.
const pyodideCachePrefix = "deno-cache-"

// cacheDir is where the warm cache for key lives.
func (in *Install) cacheDir(key string) string {
	return filepath.Join(in.StateDir, pyodideCachePrefix+key)
}

// WarmDenoCache returns the warm cache for this install and its current
// snapshot, or an error wrapping ErrNoDenoCache. It never builds one.
func (in *Install) WarmDenoCache() (*DenoCache, error) {
	snap, err := in.PyodideSnapshot()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDenoCache, err)
	}
	return in.warmDenoCache(snap)
}

func (in *Install) warmDenoCache(snap *Snapshot) (*DenoCache, error) {
	key, err := in.denoCacheKey(snap)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrNoDenoCache, err)
	}
	return publishedCache(in.cacheDir(key))
}

// EnsureDenoCache returns the warm cache, building it first when it is
// missing: it runs the loader's warm mode (Pyodide restored from snapshot,
// no guest code) in pmjail's own jail with the same paths, flags and
// environment as a run (see warmInJail).
func (in *Install) EnsureDenoCache(ctx context.Context, snap *Snapshot) (*DenoCache, error) {
	if c, err := in.warmDenoCache(snap); err == nil {
		return c, nil
	}
	key, err := in.denoCacheKey(snap)
	if err != nil {
		return nil, fmt.Errorf("build deno cache: %w", err)
	}
	files, err := pyodideGuestFiles()
	if err != nil {
		return nil, err
	}
	binds := append(in.pyodideBinds(), Bind{Source: snap.Path, Target: snapshotTarget})
	if err := in.warmInJail(ctx, in.cacheDir(key), files, binds, pythonArgs(warmHeapBytes, true, "warm", snapshotTarget)); err != nil {
		return nil, fmt.Errorf("build deno cache: %w", err)
	}
	return in.warmDenoCache(snap)
}

// Warmer carries out a WarmRun in pmjail's own jail. Package runtimes
// cannot start one (package jail imports it): the supervisor sets
// Install.Warmer to one from a package above jail (job.Warm).
type Warmer func(ctx context.Context, run WarmRun) error

// WarmRun is one run that warms a Deno cache: Launch, exactly as a job's
// root would hold it, with the host directory Cache bound writable at
// Target (DENO_DIR). Cache is the supervisor's, 0700, beneath directories
// any id may pass: the Warmer gives it to the guest's host id, which the
// jail leases only when the run starts (jail.Job.GuestOwned).
type WarmRun struct {
	Launch *Launch
	Cache  string
	Target string
}

// ErrNoWarmer means the Install has no Warmer: nothing to warm a cache in.
var ErrNoWarmer = errors.New("no jail to warm the cache in (Install.Warmer is unset)")

// warmInJail runs a Deno command line in the jail (through in.Warmer) at
// the in-jail paths (Deno at DenoTarget, files under GuestDir, binds
// read-only, the run's environment) with DENO_DIR bound writable to a
// fresh directory, then publishes a copy of it at dir, read-only, for the
// runs to copy. Deno keys its caches by the modules' URLs and content, so
// a cache warmed anywhere else would never be hit.
func (in *Install) warmInJail(ctx context.Context, dir string, files []File, binds []Bind, args []string) error {
	if in.Warmer == nil {
		return ErrNoWarmer
	}
	if err := os.MkdirAll(in.StateDir, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp(in.StateDir, ".deno-cache-build-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	// The directory the guest writes, its own for the run (see WarmRun),
	// beneath one that the jail's ids may pass but not list: the init stage
	// opens bind sources with them.
	written := filepath.Join(work, "deno")
	if err := os.Mkdir(written, 0o700); err != nil {
		return err
	}
	if err := os.Chmod(work, 0o711); err != nil {
		return err
	}

	ctx, cancel := context.WithTimeout(ctx, denoCacheBuildTimeout)
	defer cancel()
	err = in.Warmer(ctx, WarmRun{
		Launch: &Launch{
			Program: in.DenoPath,
			Target:  DenoTarget,
			Args:    args,
			Env:     denoEnv(),
			Binds:   binds,
			Files:   files,
		},
		Cache:  written,
		Target: denoDir,
	})
	// No id but the supervisor's enters work from here on, and the
	// guest's id goes to another job: what is published is a copy made
	// below it, the supervisor's.
	if cerr := os.Chmod(work, 0o700); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("warm run: %w", err)
	}
	cache := filepath.Join(work, "cache")
	if err := copyOut(written, cache); err != nil {
		return fmt.Errorf("copy the warmed cache: %w", err)
	}
	if err := in.compactCache(ctx, work, cache); err != nil {
		return err
	}
	// Readable by the jail's unprivileged ids, writable by none of them:
	// each run works on its own copy.
	if err := filepath.WalkDir(cache, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return os.Chmod(p, 0o755)
		case d.Type().IsRegular():
			return os.Chmod(p, 0o644)
		}
		// Compaction makes no other kind; none belongs in the cache.
		return os.Remove(p)
	}); err != nil {
		return err
	}
	if err := os.Rename(cache, dir); err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, os.ErrExist) {
		// Another supervisor may have published the same key first.
		if _, serr := os.Stat(dir); serr != nil {
			return err
		}
	}
	return nil
}

// writeGuestDir creates dir holding the guest files (all under GuestDir)
// by their base names, read-only: GuestDir as a build on the host sees it.
func writeGuestDir(dir string, files []File) error {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return err
	}
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, path.Base(f.Path)), f.Data, 0o444); err != nil {
			return err
		}
	}
	return nil
}

// compactCache runs denocache.mjs on the warmed cache: WAL folded in, no
// -wal or -shm file left, so the guest reads the databases read-only.
func (in *Install) compactCache(ctx context.Context, work, cache string) error {
	script := filepath.Join(work, "denocache.mjs")
	if err := os.WriteFile(script, compactScript, 0o444); err != nil {
		return fmt.Errorf("build deno cache: %w", err)
	}
	cmd := exec.CommandContext(ctx, in.DenoPath, "run",
		"--no-prompt", "--no-config", "--no-lock", "--no-remote", "--no-npm", "--no-check",
		"--allow-read="+cache, "--allow-write="+cache, script, cache)
	cmd.Dir = work
	dieWithParent(cmd)
	cmd.Env = []string{"PATH=/nonexistent", "HOME=" + work, "DENO_DIR=" + filepath.Join(work, "compact-deno"), "DENO_NO_UPDATE_CHECK=1", "NO_COLOR=1"}
	if msg, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("build deno cache: compact: %w: %s", err, msg)
	}
	for _, pattern := range []string{"*-wal", "*-shm", "*-journal"} {
		left, _ := filepath.Glob(filepath.Join(cache, pattern))
		for _, f := range left {
			if err := os.Remove(f); err != nil {
				return fmt.Errorf("build deno cache: %w", err)
			}
		}
	}
	return nil
}

// pruneCaches deletes the caches named prefix+key of keys other than the
// one dir keep has. A run that mounted one already holds its lower
// directory open; at worst it misses the cache.
func (in *Install) pruneCaches(prefix, keep string) []string {
	var removed []string
	old, _ := filepath.Glob(filepath.Join(in.StateDir, prefix+"*"))
	for _, d := range old {
		if filepath.Base(d) != keep && os.RemoveAll(d) == nil {
			removed = append(removed, d)
		}
	}
	return removed
}

// dirSize is the total size of the regular files below dir.
func dirSize(dir string) int64 {
	var n int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if info, err := d.Info(); err == nil {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}
