package runtimes

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Prepared is what Prepare built or found.
type Prepared struct {
	Snapshot *Snapshot
	// DenoCache is nil when it could not be built; DenoCacheReason says
	// why. Runs work without it, a little slower.
	DenoCache       *DenoCache
	DenoCacheReason string
	// GuestCache is the JavaScript runs' warm cache, nil when it could not
	// be built (GuestCacheReason says why).
	GuestCache       *DenoCache
	GuestCacheReason string
}

// Prepare builds what the supervisor derives from the runtimes, once per
// Pyodide and Deno version and never inside a guest: the Pyodide memory
// snapshot (required: an error if it cannot be built) and the warm Deno
// code cache (best effort). What is present and valid is kept, so it is
// cheap to call at every daemon start or before a Python run; the daemon
// should call it in the background and serve meanwhile (runs start cold
// until it is done).
func (in *Install) Prepare(ctx context.Context) (*Prepared, error) {
	snap, err := in.EnsurePyodideSnapshot(ctx)
	if err != nil {
		return nil, err
	}
	p := &Prepared{Snapshot: snap}
	if p.DenoCache, err = in.EnsureDenoCache(ctx, snap); err != nil {
		p.DenoCacheReason = err.Error()
	}
	if p.GuestCache, err = in.EnsureGuestCache(ctx); err != nil {
		p.GuestCacheReason = err.Error()
	}
	return p, nil
}

// Prune removes what other keys left in the state directory (older guest
// files, loaders, snapshots or versions) and returns it: warm caches other
// than those p holds and Pyodide snapshots other than p's, each 31 MB, and
// the work directories of builds killed mid-way (PruneBuilds).
// `pmjail prepare` calls it, runs never do, so two builds sharing a runtime
// directory do not undo each other mid-run (the other rebuilds on its next
// prepare or first Python run). What p lacks is left alone.
func (in *Install) Prune(p *Prepared) []string {
	removed := in.PruneBuilds(time.Now())
	if p.DenoCache != nil {
		removed = append(removed, in.pruneCaches(pyodideCachePrefix, filepath.Base(p.DenoCache.Dir))...)
	}
	if p.GuestCache != nil {
		removed = append(removed, in.pruneCaches(guestCachePrefix, filepath.Base(p.GuestCache.Dir))...)
	}
	if p.Snapshot != nil {
		old, _ := filepath.Glob(filepath.Join(in.StateDir, "pyodide-*.snapshot"))
		for _, f := range old {
			if f == p.Snapshot.Path {
				continue
			}
			// The sidecar first: without it the snapshot is never used.
			if err := os.Remove(f + ".json"); err != nil && !os.IsNotExist(err) {
				continue
			}
			if os.Remove(f) == nil {
				removed = append(removed, f)
			}
		}
	}
	return removed
}

// PreparePython is the first-use hook for a one-shot supervisor (the CLI)
// about to run Python: where the snapshot is missing it builds what
// Prepare builds, so a run never starts cold for lack of a `pmjail
// prepare`. With the snapshot there it builds nothing: a warm cache that
// failed to build would otherwise be tried again, a jail run each time,
// on every Python run; `pmjail prepare` and the daemon's start build it.
// The valid case costs one snapshot check.
func (in *Install) PreparePython(ctx context.Context) error {
	if _, err := in.PyodideSnapshot(); err == nil {
		return nil
	}
	if _, err := in.Prepare(ctx); err != nil {
		return fmt.Errorf("prepare python: %w", err)
	}
	return nil
}
