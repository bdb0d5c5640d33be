package runstore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// wasteful says whether the file's free pages are most of it, and at
// least compactFloor (wmu held).
func (s *Store) wasteful() (bool, error) {
	free := int64(s.db.Stats().FreeAlloc) // free and pending, as of the last commit
	var size int64
	if err := s.guard(func() error {
		return s.db.View(func(tx *bolt.Tx) error { size = tx.Size(); return nil })
	}); err != nil {
		return false, err
	}
	return free >= compactFloor && 2*free >= size, nil
}

// compact copies the store's live pages into a new file, which then takes
// the old one's place, if the old one is wasteful and no compaction was
// tried within compactEvery. Writes wait for it all (wmu); reads go on
// from the old file until the new one is in place. The new file is
// synced before its rename over the old one, and the directory after it,
// before any write is committed to it: a kill at any moment leaves
// either file whole as runs.db, and perhaps the copy, under its own name,
// which the next Open removes.
func (s *Store) compact(now time.Time) (err error) {
	if p := s.damaged.Load(); p != nil {
		return *p
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if !s.lastCompact.IsZero() && now.Sub(s.lastCompact) < compactEvery {
		return nil
	}
	if ok, err := s.wasteful(); err != nil || !ok {
		return err
	}
	s.lastCompact = now
	if err := s.compactLocked(); err != nil {
		return fmt.Errorf("run store: compact: %w", err)
	}
	return nil
}

// compactLocked is compact's copy and swap (wmu held).
func (s *Store) compactLocked() error {
	path := filepath.Join(s.dir, FileName)
	tmp := path + compactSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Synced once, whole, not at each of the copy's transactions: until
	// its rename the copy is nothing the store relies on.
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: openTimeout, NoSync: true, NoGrowSync: true})
	if err != nil {
		return err
	}
	placed := false
	defer func() {
		if !placed {
			_ = dst.Close()
			_ = os.Remove(tmp)
		}
	}()
	step("created")
	// A damaged page of the old file is a panic here as in any read:
	// guard makes it ErrDamaged, for this call and every later one.
	if err := s.guard(func() error { return bolt.Compact(dst, s.db, compactTxMax) }); err != nil {
		return err
	}
	if err := dst.Sync(); err != nil {
		return err
	}
	dst.NoSync, dst.NoGrowSync = false, false
	step("synced")

	s.dbmu.Lock()
	if err := os.Rename(tmp, path); err != nil {
		s.dbmu.Unlock()
		return err
	}
	old := s.db
	s.db, placed = dst, true
	s.dbmu.Unlock()
	step("renamed")
	// The rename is made durable before any write is committed to the new
	// file (wmu is held until then): a crash must not bring the old file
	// back without them.
	dirErr := syncDir(s.dir)
	// No read holds the old file now (dbmu): its mapping and lock go.
	if err := closeDB(old); err != nil {
		return errors.Join(dirErr, err)
	}
	return dirErr
}

func step(name string) {
	if compactHook != nil {
		compactHook(name)
	}
}

// syncDir makes the entries of directory dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
