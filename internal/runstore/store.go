// Package runstore keeps the daemon's async runs on disk: each run's
// record (its owner, state and result) and its events, in one bbolt file
// in the state directory. It owns that file: one Store per daemon, opened
// at start and closed at shutdown. Finished runs go after a retention
// time, and the oldest first when the store is over its size cap.
package runstore

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	bolt "go.etcd.io/bbolt"
	bolterrors "go.etcd.io/bbolt/errors"

	"github.com/pmjail/pmjail/api"
)

// FileName is the store's file in its directory.
const FileName = "runs.db"

// openTimeout bounds the wait for the file's lock: another daemon holding
// it is a misconfiguration to report, not to wait out.
const openTimeout = time.Second

// commitEvery is the least time between two of the store's commits.
// Each commit is an fsync of the file, and every async submission and
// every run's end is a write: writes that come within it are committed
// together (update), so that peers sending requests on many
// connections, each submitting a run and cancelling it, say, move the
// disk at most this often, not at their request rate. A write alone, on
// a store not written to within it, is committed at once.
const commitEvery = 10 * time.Millisecond

// bbolt never gives a file's pages back, and writes the list of its free
// pages at every commit: runs of large output, once pruned, leave a file
// far over the store's cap, each of whose commits then writes a page id
// for each of its free pages. The store copies its live pages into a new
// file (compact) when the free ones are most of the file and at least
// compactFloor, so that the file stays within about twice what it holds
// (or that plus compactFloor), and each commit writes the ids of at most
// that many free pages.
const (
	compactFloor = 32 << 20
	// compactEvery is the least time between two compactions while the
	// store is open: each writes the store's whole content again, and
	// holds the writes while it catches up with them.
	compactEvery = time.Minute
	// compactTxMax bounds each transaction of the copy, which bbolt
	// holds in memory until it commits.
	compactTxMax = 16 << 20
	// compactSuffix names the new file until it is whole and synced: a
	// kill before its rename leaves the old file the store's, and the
	// next Open removes this one.
	compactSuffix = ".compact"
)

// compactHook, when set (by tests), is called at each step of a
// compaction, named.
var compactHook func(step string)

// The store's errors.
var (
	// ErrNotFound: no run of that id, or none the asker owns.
	ErrNotFound = errors.New("no such run")
	// ErrKeyConflict: an idempotency key given before with another job.
	ErrKeyConflict = errors.New("idempotency key used with another job")
	// ErrEnded: the run already has its final result.
	ErrEnded = errors.New("run already ended")
	// ErrIDTaken: a new run's id is a stored run's (ids are 64 random
	// bits: never in practice, but a run is not written over).
	ErrIDTaken = errors.New("run id already stored")
	// ErrNotStored: a run's end was stored without its result and
	// events, which the store could not hold (Finish).
	ErrNotStored = errors.New("the run's result could not be stored: it was ended without it")
	// ErrDamaged: the file is not a sound store (a bad disk, a crash of
	// the file system, a hand that wrote into it). bbolt panics on a bad
	// page; the store turns that into this error, not a daemon's crash.
	ErrDamaged = errors.New("the run store's file is damaged")
)

var (
	bucketRuns   = []byte("runs")   // id -> Record (JSON)
	bucketEvents = []byte("events") // id -> the run's NDJSON events, as Finish took them
	bucketKeys   = []byte("keys")   // owner NUL key -> id
)

// Limits bound what the store keeps of finished runs.
type Limits struct {
	// Retention is how long a finished run is kept.
	Retention time.Duration
	// MaxBytes caps the finished runs' records and events together; over
	// it, the oldest finished runs go first.
	MaxBytes int64
}

// Record is one async run as kept.
type Record struct {
	ID    string `json:"id"`
	Owner string `json:"owner"`
	// Key is the submission's idempotency key, and Sum a digest of its
	// job, to tell the same submission from another under the same key.
	Key string `json:"key,omitempty"`
	Sum string `json:"sum,omitempty"`
	// Status is queued until the run ends: whether it runs is the
	// daemon's to tell, live.
	Status      api.RunState `json:"status"`
	SubmittedAt time.Time    `json:"submitted_at"`
	EndedAt     time.Time    `json:"ended_at,omitzero"`
	// Result is the run's api.Result once it ended. It stays the last
	// field: ResultChunk finds it by that.
	Result json.RawMessage `json:"result,omitempty"`
}

// Run is the record as the API shows it.
func (r *Record) Run() (*api.Run, error) {
	run := &api.Run{ID: r.ID, Status: r.Status, SubmittedAt: api.Time{Time: r.SubmittedAt}}
	if len(r.Result) > 0 {
		run.Result = new(api.Result)
		if err := json.Unmarshal(r.Result, run.Result); err != nil {
			return nil, fmt.Errorf("run %s: stored result: %w", r.ID, err)
		}
	}
	return run, nil
}

// Store is the open store.
type Store struct {
	// db is the open file; a compaction puts another in its place, with
	// dbmu held written: reads hold it read, commits hold wmu.
	db   *bolt.DB
	dbmu sync.RWMutex
	// wmu is held by each commit, and by a compaction as it starts and
	// as it ends (compact): writes wait for it, reads do not.
	wmu sync.Mutex
	// dirty, while a compaction copies the file, holds the keys the
	// writes committed meanwhile changed (touch; wmu held).
	dirty map[dirtyKey]struct{}
	// cmu is held by a compaction; lastCompact is when the last one was
	// tried (cmu held).
	cmu         sync.Mutex
	lastCompact time.Time
	dir         string
	lim         Limits
	// damaged is the first panic a transaction recovered from. bbolt
	// may have left its locks held as it unwound: every later call is
	// refused with it, none waits on them.
	damaged atomic.Pointer[error]

	// mu guards the accounting of finished runs, which pruning reads,
	// and lim, which a reload changes. The runs are kept by id and, for
	// pruning, by owner, oldest first: a run's end prunes at the cost of
	// the owners and the runs it removes, not of every run kept (a store
	// at its cap holds a great many small runs, which a listing at each
	// run's end would all walk).
	mu     sync.Mutex
	ended  map[string]kept
	owners map[string]*owned
	bytes  int64

	// commits counts the write transactions committed, each an fsync.
	commits atomic.Int64
	// writes are the writes waiting for a commit (update).
	writes writeQueue
}

// writeQueue holds the writes waiting for the next commit. One writer at
// a time leads: it waits out commitEvery since the last commit, commits
// every write then waiting in one transaction, and hands the lead to the
// first write that came meanwhile; the others wait for their commit.
// (bbolt's DB.Batch groups writes too, but holds every write, a lone one
// on an idle store included, for its whole delay: each async submission
// would wait it out.)
type writeQueue struct {
	mu      sync.Mutex
	pending []*write
	leading bool
	last    time.Time
}

// write is one update's transaction function, waiting for its commit.
type write struct {
	fn  func(*bolt.Tx) error
	err error
	// done is closed once the write is committed or refused (err);
	// lead, when the write is handed the lead, still uncommitted.
	done, lead chan struct{}
}

// kept is what pruning needs of a finished run.
type kept struct {
	id    string
	owner string
	at    time.Time
	size  int64
}

// owned is one owner's finished runs, oldest first, and their bytes.
type owned struct {
	runs  []kept
	bytes int64
}

// Open opens (or creates) the store in dir. Runs a previous daemon left
// queued or running never finish: Open ends them as cancelled, with
// lostReason in their result, and returns how many it ended.
func Open(dir string, lim Limits, lostReason string) (*Store, int, error) {
	if lim.Retention <= 0 || lim.MaxBytes <= 0 {
		return nil, 0, fmt.Errorf("run store: retention %v and size cap %d must be above 0", lim.Retention, lim.MaxBytes)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, 0, fmt.Errorf("run store: %w", err)
	}
	path := filepath.Join(dir, FileName)
	db, err := openFile(path)
	if err != nil {
		return nil, 0, fmt.Errorf("run store %s: %w", path, err)
	}
	// A copy a compaction left as it was killed: never the store's, which
	// it is only once renamed over runs.db. The file's lock, held now,
	// says no other daemon is making it.
	if err := os.Remove(path + compactSuffix); err != nil && !errors.Is(err, os.ErrNotExist) {
		_ = closeDB(db)
		return nil, 0, fmt.Errorf("run store: remove a compaction's leftover: %w", err)
	}
	s := &Store{db: db, dir: dir, lim: lim, ended: map[string]kept{}, owners: map[string]*owned{}}
	lost := 0
	now := time.Now()
	// Accounted oldest first, so that each owner's runs are appended in
	// order, not inserted one by one into the middle.
	var finished []kept
	err = s.update(func(tx *bolt.Tx) error {
		for _, b := range [][]byte{bucketRuns, bucketEvents, bucketKeys} {
			if _, err := tx.CreateBucketIfNotExists(b); err != nil {
				return err
			}
		}
		runs, events := tx.Bucket(bucketRuns), tx.Bucket(bucketEvents)
		var unfinished []*Record
		err := runs.ForEach(func(k, v []byte) error {
			// Every byte is read (a record cut short or written over is
			// found here), but only the head is decoded: a result, tens
			// of MiB perhaps, is not copied at each start.
			var r Record
			if !json.Valid(v) {
				return fmt.Errorf("record %q: not JSON", k)
			}
			if err := decodeHead(v, &r); err != nil {
				return fmt.Errorf("record %q: %w", k, err)
			}
			if !r.Status.Ended() {
				unfinished = append(unfinished, &r)
				return nil
			}
			finished = append(finished, kept{id: r.ID, owner: r.Owner, at: r.EndedAt, size: int64(len(v) + len(events.Get(k)))})
			return nil
		})
		if err != nil {
			return fmt.Errorf("%w: %w", ErrDamaged, err)
		}
		// Every page is read once here, where a bad one is an error
		// the daemon reports at its start, not a panic in a run's end.
		for _, b := range [][]byte{bucketEvents, bucketKeys} {
			if err := tx.Bucket(b).ForEach(func(_, v []byte) error { _ = len(v); return nil }); err != nil {
				return err
			}
		}
		for _, r := range unfinished {
			r.Status, r.EndedAt = api.RunCancelled, now
			r.Result = Cancelled(r.ID, lostReason)
			s.touch(bucketRuns, []byte(r.ID))
			size, err := putRecord(runs, r)
			if err != nil {
				return err
			}
			finished = append(finished, kept{id: r.ID, owner: r.Owner, at: now, size: size + int64(len(events.Get([]byte(r.ID))))})
			lost++
		}
		return nil
	})
	sort.SliceStable(finished, func(i, j int) bool { return finished[i].at.Before(finished[j].at) })
	for _, k := range finished {
		s.account(k)
	}
	if err != nil {
		_ = s.close()
		return nil, 0, fmt.Errorf("run store %s: %w", path, err)
	}
	if _, err := s.prune(now); err != nil {
		_ = s.close()
		return nil, 0, err
	}
	// A file left wasteful by the last daemon is compacted now. A failure
	// that is not damage (a disk too full for the copy) leaves the store
	// as it is: the next Prune tries again, and its caller hears of it.
	if err := s.compact(now); errors.Is(err, ErrDamaged) {
		_ = s.close()
		return nil, 0, err
	}
	return s, lost, nil
}

// openFile opens the bbolt file at path. bbolt panics on a damaged
// page it reads as it opens (its freelist), or faults reading its mapping
// past the file's end (a truncated file: debug.SetPanicOnFault makes that
// a panic too, not the process's death): that is ErrDamaged, with the
// file closed. The file's mapping stays, and with it the file's lock,
// until the process ends: bbolt gives no way to undo it. The daemon sets
// such a file aside (SetAside) and opens a new one, once, at its start.
func openFile(path string) (db *bolt.DB, err error) {
	var f *os.File
	opts := &bolt.Options{Timeout: openTimeout, OpenFile: func(name string, flag int, mode os.FileMode) (*os.File, error) {
		var err error
		f, err = os.OpenFile(name, flag, mode)
		return f, err
	}}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			if f != nil {
				f.Close()
			}
			db, err = nil, fmt.Errorf("%w: %v", ErrDamaged, p)
		}
	}()
	if err := checkFile(path); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	db, err = bolt.Open(path, 0o600, opts)
	if errors.Is(err, bolterrors.ErrTimeout) {
		// bbolt says "timeout": what timed out is the wait for its lock.
		return nil, fmt.Errorf("%w: another process holds the file's lock for %s (does another pmjail serve use this runs.dir?)", err, openTimeout)
	}
	if err != nil && !errors.Is(err, bolterrors.ErrTimeout) && !errors.Is(err, os.ErrPermission) && !errors.Is(err, os.ErrNotExist) {
		// Not a sound file (bad meta pages, a bad size): bbolt's
		// words, under the store's sentinel.
		err = fmt.Errorf("%w: %w", ErrDamaged, err)
	}
	return db, err
}

// checkFile checks, before bbolt maps it, the store's file at path (if
// there is one) for the damage bbolt cannot survive reading
// (checkFreelist).
func checkFile(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return nil // none yet (bbolt makes it), or one bbolt's open refuses itself
	}
	defer f.Close()
	return checkFreelist(f)
}

// SetAside renames a damaged store's file in dir out of the way, to a
// name that tells when, and returns the new path: Open then starts an
// empty store, and the old file stays for whoever wants to look into it.
func SetAside(dir string) (string, error) {
	path := filepath.Join(dir, FileName)
	aside := path + ".damaged-" + time.Now().UTC().Format("20060102T150405.000000000Z")
	if err := os.Rename(path, aside); err != nil {
		return "", fmt.Errorf("run store: set the damaged file aside: %w", err)
	}
	return aside, nil
}

// Close closes the file; a store damaged while open is left to the
// process's end, as bbolt may hold its locks (see damaged).
func (s *Store) Close() error { return s.close() }

func (s *Store) close() (err error) {
	if p := s.damaged.Load(); p != nil {
		return *p
	}
	s.wmu.Lock()
	defer s.wmu.Unlock()
	s.dbmu.Lock()
	defer s.dbmu.Unlock()
	return closeDB(s.db)
}

// closeDB closes db, a panic on a damaged page its close reads an error.
func closeDB(db *bolt.DB) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: close: %v", ErrDamaged, p)
		}
	}()
	return db.Close()
}

// update and view are bbolt's Update and View, with a panic on a damaged
// page turned into ErrDamaged, for this call and every later one. An
// update may be committed with others that came with it (commitEvery):
// fn is then called in their transaction, in the order they came, and
// is called again, alone or with others, when another write in it is
// refused; so it must change nothing but the transaction and the
// variables it sets afresh.
func (s *Store) update(fn func(*bolt.Tx) error) error {
	if p := s.damaged.Load(); p != nil {
		return *p
	}
	w := &write{fn: fn, done: make(chan struct{}), lead: make(chan struct{})}
	q := &s.writes
	q.mu.Lock()
	q.pending = append(q.pending, w)
	if q.leading {
		q.mu.Unlock()
		select {
		case <-w.done:
			return w.err
		case <-w.lead:
		}
	} else {
		q.leading = true
		q.mu.Unlock()
	}
	// The lead: w is among the writes pending, all of which this batch
	// takes.
	q.mu.Lock()
	if wait := commitEvery - time.Since(q.last); wait > 0 {
		q.mu.Unlock()
		time.Sleep(wait)
		q.mu.Lock()
	}
	batch := q.pending
	q.pending = nil
	q.mu.Unlock()
	s.wmu.Lock()
	s.commit(batch)
	s.wmu.Unlock()
	q.mu.Lock()
	q.last = time.Now()
	if len(q.pending) > 0 {
		close(q.pending[0].lead)
	} else {
		q.leading = false
	}
	q.mu.Unlock()
	return w.err
}

// commit commits batch's writes in one transaction, in order, and gives
// each its outcome. A write its function refuses gets that refusal
// alone: the writes before it are committed together, it alone (as if
// it had come alone, after them), then those after it. A transaction
// that fails as a whole (its pages do not fit on the disk, say) is
// tried again in halves, down to each write alone: one run's end, tens
// of MiB of another peer's output, that cannot be stored fails alone,
// not every submission and run's end that came within the same
// commitEvery.
func (s *Store) commit(batch []*write) {
	if len(batch) == 0 {
		return
	}
	refused := -1
	err := s.guard(func() error {
		return s.db.Update(func(tx *bolt.Tx) error {
			for i, w := range batch {
				if err := w.fn(tx); err != nil {
					refused = i
					return err
				}
			}
			return nil
		})
	})
	switch {
	case err == nil || len(batch) == 1 || s.damaged.Load() != nil:
	case refused >= 0:
		s.commit(batch[:refused])
		s.commit(batch[refused : refused+1])
		s.commit(batch[refused+1:])
		return
	default:
		half := len(batch) / 2
		s.commit(batch[:half])
		s.commit(batch[half:])
		return
	}
	if err == nil {
		s.commits.Add(1)
	}
	for _, w := range batch {
		w.err = err
		close(w.done)
	}
}

func (s *Store) view(fn func(*bolt.Tx) error) error {
	s.dbmu.RLock()
	defer s.dbmu.RUnlock()
	return s.guard(func() error { return s.db.View(fn) })
}

func (s *Store) guard(call func() error) (err error) {
	if p := s.damaged.Load(); p != nil {
		return *p
	}
	// A fault reading the file's mapping (truncated under the store) is a
	// panic, not the daemon's death.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: %v (restart the daemon to set it aside)", ErrDamaged, p)
			s.damaged.CompareAndSwap(nil, &err)
		}
	}()
	return call()
}

// Cancelled is the result of a run cancelled for reason before it had
// one of its own, as the jail words a cancelled run's.
func Cancelled(id, reason string) json.RawMessage {
	code, _ := api.StatusCancelled.ExitCode()
	res := api.Result{ID: id, Status: api.StatusCancelled, ExitCode: code, Logs: []api.LogEntry{},
		Error: &api.ErrorInfo{Code: string(api.StatusCancelled), Message: "run cancelled: " + reason}}
	data, _ := json.Marshal(res)
	return data
}

func putRecord(b *bolt.Bucket, r *Record) (int64, error) {
	// The result, which may be hundreds of megabytes, is appended as it
	// is, after the rest: json.Marshal would check and copy it twice.
	// It stays the record's last field (resultField).
	head := *r
	head.Result = nil
	data, err := json.Marshal(&head)
	if err != nil {
		return 0, err
	}
	if len(r.Result) > 0 {
		if !json.Valid(r.Result) {
			return 0, fmt.Errorf("run %s: its result is not JSON", r.ID)
		}
		whole := make([]byte, 0, len(data)+len(resultField)+len(r.Result))
		whole = append(whole, data[:len(data)-1]...)
		whole = append(whole, resultField...)
		whole = append(whole, r.Result...)
		data = append(whole, '}')
	}
	return int64(len(data)), b.Put([]byte(r.ID), data)
}

// dirtyKey is a key of one of the store's buckets.
type dirtyKey struct{ bucket, key string }

// touch notes that a write changes key in bucket, while a compaction
// copies the file (s.dirty not nil): the compaction then copies that
// key's value as it is after the copy, or its removal. Every Put and
// Delete of the store's buckets is noted (wmu held, as in every write's
// function): one missed would be lost by the compaction.
func (s *Store) touch(bucket, key []byte) {
	if s.dirty != nil {
		s.dirty[dirtyKey{string(bucket), string(key)}] = struct{}{}
	}
}

func keyOf(owner, key string) []byte { return []byte(owner + "\x00" + key) }

// Create stores a new queued run. With an idempotency key the owner gave
// before, it stores nothing and returns the run the key made, with
// ErrKeyConflict if that run's job (its Sum) differs.
func (s *Store) Create(r *Record) (existing *Record, err error) {
	if !utf8.ValidString(r.Key) {
		// JSON would keep another key in the record than in the keys
		// bucket, and Prune would never find this one.
		return nil, fmt.Errorf("run store: create %s: key %q is not UTF-8", r.ID, r.Key)
	}
	err = s.update(func(tx *bolt.Tx) error {
		runs, keys := tx.Bucket(bucketRuns), tx.Bucket(bucketKeys)
		if runs.Get([]byte(r.ID)) != nil {
			return ErrIDTaken
		}
		if r.Key != "" {
			if id := keys.Get(keyOf(r.Owner, r.Key)); id != nil {
				if v := runs.Get(id); v != nil {
					existing = new(Record)
					if err := decodeHead(v, existing); err != nil {
						return err
					}
					if existing.Sum != r.Sum {
						return fmt.Errorf("key %q: %w (run %s)", r.Key, ErrKeyConflict, existing.ID)
					}
					return nil
				}
				// The run was pruned: the key is free again.
			}
			s.touch(bucketKeys, keyOf(r.Owner, r.Key))
			if err := keys.Put(keyOf(r.Owner, r.Key), []byte(r.ID)); err != nil {
				return err
			}
		}
		s.touch(bucketRuns, []byte(r.ID))
		_, err := putRecord(runs, r)
		return err
	})
	if errors.Is(err, ErrKeyConflict) {
		return existing, fmt.Errorf("run store: create %s: %w", r.ID, err)
	}
	if err != nil {
		return nil, fmt.Errorf("run store: create %s: %w", r.ID, err)
	}
	return existing, nil
}

// CreateAll stores new queued runs without idempotency keys (a batch's)
// in one transaction: all of them, or none and the error.
func (s *Store) CreateAll(rs []*Record) error {
	err := s.update(func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		for _, r := range rs {
			if r.Key != "" {
				return fmt.Errorf("run %s: a run made with others takes no idempotency key", r.ID)
			}
			if runs.Get([]byte(r.ID)) != nil {
				return fmt.Errorf("run %s: %w", r.ID, ErrIDTaken)
			}
			s.touch(bucketRuns, []byte(r.ID))
			if _, err := putRecord(runs, r); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("run store: create %d runs: %w", len(rs), err)
	}
	return nil
}

// Lookup returns the run owner's idempotency key made, or nil, without
// its result (as Head).
func (s *Store) Lookup(owner, key string) (*Record, error) {
	var r *Record
	err := s.view(func(tx *bolt.Tx) error {
		id := tx.Bucket(bucketKeys).Get(keyOf(owner, key))
		if id == nil {
			return nil
		}
		v := tx.Bucket(bucketRuns).Get(id)
		if v == nil {
			return nil
		}
		r = new(Record)
		return decodeHead(v, r)
	})
	if err != nil {
		return nil, fmt.Errorf("run store: key %q: %w", key, err)
	}
	return r, nil
}

// decodeHead decodes the stored record v into r without its result,
// which it neither copies nor scans (Result is the record's last field,
// see resultField): a result may be hundreds of megabytes, and a peer
// may ask for its run on each of its connections at once. Whether the
// run ended, and so has a result, its Status says.
func decodeHead(v []byte, r *Record) error {
	if i := bytes.Index(v, resultField); i >= 0 {
		v = append(v[:i:i], '}')
	}
	return json.Unmarshal(v, r)
}

// Get returns the run id if owner owns it, else ErrNotFound: a run of
// another owner is not told apart from none.
func (s *Store) Get(owner, id string) (*Record, error) {
	return s.get(owner, id, json.Unmarshal)
}

// Head is Get without the run's result (Result is nil; ResultChunk reads
// it): what a request for a run needs to answer it a chunk at a time.
func (s *Store) Head(owner, id string) (*Record, error) {
	return s.get(owner, id, func(v []byte, r any) error { return decodeHead(v, r.(*Record)) })
}

func (s *Store) get(owner, id string, decode func([]byte, any) error) (*Record, error) {
	var r *Record
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRuns).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		r = new(Record)
		if err := decode(v, r); err != nil {
			return err
		}
		if r.Owner != owner {
			return ErrNotFound
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", id, err)
	}
	return r, nil
}

// Events returns the stored events of run id (owned by owner), as Finish
// took them (the daemon leaves out the result event, which the record's
// result makes again); none before the run ended.
func (s *Store) Events(owner, id string) ([]byte, error) {
	if _, err := s.Head(owner, id); err != nil {
		return nil, err
	}
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		out = bytes.Clone(tx.Bucket(bucketEvents).Get([]byte(id)))
		return nil
	})
	return out, err
}

// EventsChunk returns at most max bytes of run id's stored events (as
// Events), from offset on: none past their end, ErrNotFound once the
// run is gone. Its caller checked the run's owner (Get) before the first
// chunk: reading the record again at each chunk would decode its result,
// megabytes perhaps, for each of a stream's chunks; a pruned run's id
// is not made again.
func (s *Store) EventsChunk(id string, offset, max int) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		if tx.Bucket(bucketRuns).Get([]byte(id)) == nil {
			return ErrNotFound
		}
		v := tx.Bucket(bucketEvents).Get([]byte(id))
		if offset < len(v) {
			out = bytes.Clone(v[offset:min(len(v), offset+max)])
		}
		return nil
	})
	return out, err
}

// resultField is how a stored record's result begins: Result is
// Record's last field, so its raw JSON runs from there to the record's
// closing brace. Within a string the quotes would be escaped, so its
// first occurrence is the field's.
var resultField = []byte(`,"result":`)

// ResultChunk returns at most max bytes of run id's stored result (the
// JSON of Record.Result), from offset on: none past its end or before
// the run ended, ErrNotFound once the run is gone. As EventsChunk, its
// caller checked the owner: a result may be megabytes, and a reader
// that stops reading holds this chunk alone.
func (s *Store) ResultChunk(id string, offset, max int) ([]byte, error) {
	var out []byte
	err := s.view(func(tx *bolt.Tx) error {
		v := tx.Bucket(bucketRuns).Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		i := bytes.Index(v, resultField)
		if i < 0 {
			return nil
		}
		raw := v[i+len(resultField) : len(v)-1]
		if offset < len(raw) {
			out = bytes.Clone(raw[offset:min(len(raw), offset+max)])
		}
		return nil
	})
	return out, err
}

// Finish stores the run's final state, result and events, then prunes.
// A run that already ended keeps its first end (ErrEnded). An end the
// store cannot hold (its pages do not fit on the disk, say) is stored
// without its result and events, as an internal error (NotStored), and
// Finish returns ErrNotStored with why: the run would otherwise stay
// queued for ever, since runs not ended are never pruned, and its owner
// would wait for an end that never comes.
func (s *Store) Finish(id string, status api.RunState, result json.RawMessage, events []byte) error {
	now := time.Now()
	k, err := s.end(id, status, result, events, now)
	if err != nil && !errors.Is(err, ErrEnded) && !errors.Is(err, ErrNotFound) && s.damaged.Load() == nil {
		if again, aerr := s.end(id, status, NotStored(id), nil, now); aerr == nil {
			k, err = again, fmt.Errorf("%w: %w", ErrNotStored, err)
		}
	}
	if k == nil {
		return fmt.Errorf("run store: finish %s: %w", id, err)
	}
	s.mu.Lock()
	s.account(*k)
	s.mu.Unlock()
	// A run's end prunes but does not compact: it would wait for the
	// copy. The daemon's periodic Prune does.
	_, perr := s.prune(now)
	if err != nil {
		return fmt.Errorf("run store: finish %s: %w", id, err)
	}
	return perr
}

// end writes the run's end (Finish), and returns it as accounted, or
// nil and why not.
func (s *Store) end(id string, status api.RunState, result json.RawMessage, events []byte, now time.Time) (*kept, error) {
	var size int64
	var owner string
	err := s.update(func(tx *bolt.Tx) error {
		runs := tx.Bucket(bucketRuns)
		v := runs.Get([]byte(id))
		if v == nil {
			return ErrNotFound
		}
		var r Record
		if err := json.Unmarshal(v, &r); err != nil {
			return err
		}
		if r.Status.Ended() {
			return ErrEnded
		}
		r.Status, r.EndedAt, r.Result = status, now, result
		owner = r.Owner
		s.touch(bucketRuns, []byte(id))
		n, err := putRecord(runs, &r)
		if err != nil {
			return err
		}
		size = n + int64(len(events))
		if len(events) == 0 {
			return nil
		}
		s.touch(bucketEvents, []byte(id))
		return tx.Bucket(bucketEvents).Put([]byte(id), events)
	})
	if err != nil {
		return nil, err
	}
	return &kept{id: id, owner: owner, at: now, size: size}, nil
}

// NotStored is the result of a run whose own could not be stored
// (Finish). It does not say why: the daemon's log does, and the store's
// errors name its file, a path on the daemon's host.
func NotStored(id string) json.RawMessage {
	code, _ := api.StatusInternalError.ExitCode()
	res := api.Result{ID: id, Status: api.StatusInternalError, ExitCode: code, Logs: []api.LogEntry{},
		Error: &api.ErrorInfo{Code: string(api.StatusInternalError), Message: "the run ended, but the daemon could not store its result (its log says why)"}}
	data, _ := json.Marshal(res)
	return data
}

// account counts a finished run (s.mu held, or the store not yet shared)
// among its owner's, after those that ended before or with it: at the
// end, but for a clock stepped back.
func (s *Store) account(k kept) {
	if old, ok := s.ended[k.id]; ok {
		s.forget(old)
	}
	o := s.owners[k.owner]
	if o == nil {
		o = &owned{}
		s.owners[k.owner] = o
	}
	i := len(o.runs)
	for i > 0 && o.runs[i-1].at.After(k.at) {
		i--
	}
	o.runs = slices.Insert(o.runs, i, k)
	o.bytes += k.size
	s.ended[k.id] = k
	s.bytes += k.size
}

// forget takes a counted run out of the accounting (s.mu held).
func (s *Store) forget(k kept) {
	o := s.owners[k.owner]
	if o == nil {
		return
	}
	if i := slices.IndexFunc(o.runs, func(r kept) bool { return r.id == k.id }); i >= 0 {
		o.runs = slices.Delete(o.runs, i, i+1)
	}
	s.drop(k, o)
}

// drop uncounts k, which o's runs no longer hold (s.mu held).
func (s *Store) drop(k kept, o *owned) {
	o.bytes -= k.size
	if len(o.runs) == 0 {
		delete(s.owners, k.owner)
	}
	delete(s.ended, k.id)
	s.bytes -= k.size
}

// popOldest uncounts o's oldest run and returns it (s.mu held).
func (s *Store) popOldest(o *owned) kept {
	k := o.runs[0]
	o.runs[0] = kept{} // its strings go with it
	o.runs = o.runs[1:]
	s.drop(k, o)
	return k
}

// SetLimits changes the limits, as a config reload does, and prunes to
// them at once.
func (s *Store) SetLimits(lim Limits, now time.Time) (int, error) {
	if lim.Retention <= 0 || lim.MaxBytes <= 0 {
		return 0, fmt.Errorf("run store: retention %v and size cap %d must be above 0", lim.Retention, lim.MaxBytes)
	}
	s.mu.Lock()
	s.lim = lim
	s.mu.Unlock()
	return s.Prune(now)
}

// Stats returns the finished runs kept and their bytes.
func (s *Store) Stats() (runs int, bytes int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.ended), s.bytes
}

// Prune removes the finished runs past their retention at now, then,
// while the store is over its size cap, the oldest run of the owner that
// keeps the most bytes, and returns how many it removed: an owner that
// fills the store prunes its own runs, not another's. Runs not yet ended
// are never pruned. It then compacts the file if its free pages are most
// of it (compact), at most once every compactEvery.
func (s *Store) Prune(now time.Time) (int, error) {
	n, err := s.prune(now)
	if err != nil {
		return n, err
	}
	return n, s.compact(now)
}

func (s *Store) prune(now time.Time) (int, error) {
	s.mu.Lock()
	// The runs to remove are uncounted here, so that a Prune at the same
	// time picks others; counted again if the removal fails.
	var gone []kept
	for _, o := range s.owners {
		for len(o.runs) > 0 && now.Sub(o.runs[0].at) >= s.lim.Retention {
			gone = append(gone, s.popOldest(o))
		}
	}
	for s.bytes > s.lim.MaxBytes {
		var largest *owned
		name := ""
		for owner, o := range s.owners {
			if len(o.runs) > 0 && (largest == nil || o.bytes > largest.bytes || o.bytes == largest.bytes && owner < name) {
				largest, name = o, owner
			}
		}
		if largest == nil {
			break
		}
		gone = append(gone, s.popOldest(largest))
	}
	s.mu.Unlock()
	if len(gone) == 0 {
		return 0, nil
	}
	err := s.update(func(tx *bolt.Tx) error {
		runs, events, keys := tx.Bucket(bucketRuns), tx.Bucket(bucketEvents), tx.Bucket(bucketKeys)
		for _, g := range gone {
			if v := runs.Get([]byte(g.id)); v != nil {
				var r Record
				if err := decodeHead(v, &r); err == nil && r.Key != "" {
					s.touch(bucketKeys, keyOf(r.Owner, r.Key))
					if err := keys.Delete(keyOf(r.Owner, r.Key)); err != nil {
						return err
					}
				}
			}
			s.touch(bucketRuns, []byte(g.id))
			s.touch(bucketEvents, []byte(g.id))
			if err := runs.Delete([]byte(g.id)); err != nil {
				return err
			}
			if err := events.Delete([]byte(g.id)); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		s.mu.Lock()
		for _, g := range gone {
			if _, again := s.ended[g.id]; !again {
				s.account(g)
			}
		}
		s.mu.Unlock()
		return 0, fmt.Errorf("run store: prune: %w", err)
	}
	return len(gone), nil
}
