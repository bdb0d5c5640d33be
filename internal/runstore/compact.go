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
// least compactFloor (cmu held).
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
// tried within compactEvery. One runs at a time: a Prune that comes
// during one does not wait for it.
//
// The copy is made from a read transaction, writes going on meanwhile:
// a copy under the store's writes held them for all of it, seconds at
// the default cap, once a minute at a peer's will. The keys those
// writes changed are noted (touch); once the copy is done, writes are
// held (wmu) while those keys alone are copied again, as they are then,
// the new file is synced and renamed over the old one, and the directory
// synced, before any write is committed to the new file: a kill at any
// moment leaves either file whole as runs.db, and perhaps the copy,
// under its own name, which the next Open removes. Reads go on from the
// old file until the rename.
func (s *Store) compact(now time.Time) (err error) {
	if p := s.damaged.Load(); p != nil {
		return *p
	}
	if !s.cmu.TryLock() {
		return nil
	}
	defer s.cmu.Unlock()
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

// compactLocked is compact's copy and swap (cmu held).
func (s *Store) compactLocked() (err error) {
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
	// Noted from before the copy's read transaction begins: a write
	// committed in between is both copied and noted, which is no harm.
	s.wmu.Lock()
	s.dirty = map[dirtyKey]struct{}{}
	s.wmu.Unlock()
	held := false
	var old *bolt.DB
	defer func() {
		if !held {
			s.wmu.Lock()
		}
		s.dirty = nil
		s.wmu.Unlock()
		if !placed {
			_ = dst.Close()
			_ = os.Remove(tmp)
		}
		// No read holds the old file now (dbmu), nor a write (wmu
		// was held as it was replaced): its mapping and lock go, and
		// with its last descriptor its blocks, which takes the file
		// system a while: writes do not wait for it.
		if old != nil {
			err = errors.Join(err, closeDB(old))
		}
	}()
	step("created")
	// A damaged page of the old file is a panic here as in any read:
	// guard makes it ErrDamaged, for this call and every later one.
	if err := s.guard(func() error { return bolt.Compact(dst, s.db, compactTxMax) }); err != nil {
		return err
	}
	// The copy's pages go to the disk before writes are held: this sync
	// is most of a compaction's time, the one below the catching up's.
	if err := dst.Sync(); err != nil {
		return err
	}
	step("copied")
	s.wmu.Lock()
	held = true
	// The writes committed during the copy, copied again: the keys they
	// changed, as they are now, or their removal.
	if err := s.guard(func() error { return s.db.View(func(src *bolt.Tx) error { return catchUp(dst, src, s.dirty) }) }); err != nil {
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
	old = s.db
	s.db, placed = dst, true
	s.dbmu.Unlock()
	step("renamed")
	// The rename is made durable before any write is committed to the new
	// file (wmu is held until then): a crash must not bring the old file
	// back without them.
	return syncDir(s.dir)
}

// catchUp copies into dst the keys of dirty as src holds them, and
// removes from dst those src no longer holds, in one transaction.
func catchUp(dst *bolt.DB, src *bolt.Tx, dirty map[dirtyKey]struct{}) error {
	if len(dirty) == 0 {
		return nil
	}
	return dst.Update(func(tx *bolt.Tx) error {
		for k := range dirty {
			from := src.Bucket([]byte(k.bucket))
			to, err := tx.CreateBucketIfNotExists([]byte(k.bucket))
			if err != nil {
				return err
			}
			var v []byte
			if from != nil {
				v = from.Get([]byte(k.key))
			}
			if v == nil {
				err = to.Delete([]byte(k.key))
			} else {
				// src's pages stay mapped until dst's commit: this
				// transaction is within src's.
				err = to.Put([]byte(k.key), v)
			}
			if err != nil {
				return fmt.Errorf("bucket %s, key %q: %w", k.bucket, k.key, err)
			}
		}
		return nil
	})
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
