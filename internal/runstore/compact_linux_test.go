package runstore

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// small is a run wasteful keeps, and what it must read back.
type small struct {
	id             string
	result, events []byte
}

// wasteful makes, in dir, the store's file as runs of large output leave
// it once pruned: a store that held ten runs of 8 MiB (bigEnd) and holds
// small runs alone now, its file as large as ever. Pruned without a
// compaction (prune, as a run's end prunes). The store is returned open.
func wasteful(t *testing.T, dir string) (*Store, []small) {
	t.Helper()
	s, _ := open(t, dir, Limits{Retention: time.Hour, MaxBytes: 1 << 30})
	for i := range 10 {
		id := fmt.Sprintf("large-%d", i)
		if _, err := s.Create(&Record{ID: id, Owner: "uid:1", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		res, ev := bigEnd(id)
		if err := s.Finish(id, api.RunDone, res, ev); err != nil {
			t.Fatal(err)
		}
	}
	mid := time.Now()
	var kept []small
	for i := range 20 {
		id := fmt.Sprintf("small-%d", i)
		if _, err := s.Create(&Record{ID: id, Owner: "uid:2", Key: "k" + id, Sum: "s", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		res := []byte(`{"id":"` + id + `","status":"ok","stdout":"` + strings.Repeat("y", 100*i) + `"}`)
		ev := []byte(`{"type":"stdout","data":"` + strings.Repeat("z", 200*i) + `"}` + "\n")
		if err := s.Finish(id, api.RunDone, res, ev); err != nil {
			t.Fatal(err)
		}
		kept = append(kept, small{id, res, ev})
	}
	// One still queued: a compaction keeps it as it is.
	if _, err := s.Create(&Record{ID: "queued", Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.prune(mid.Add(time.Hour)); err != nil || n != 10 {
		t.Fatalf("pruned %d: %v, want the 10 large runs", n, err)
	}
	return s, kept
}

// readable fails the test unless s holds every run of kept as it was
// stored, and the queued one.
func readable(t *testing.T, s *Store, kept []small) {
	t.Helper()
	readableRuns(t, s, kept)
	if r, err := s.Get("uid:2", "queued"); err != nil || r.Status != api.RunQueued && r.Status != api.RunCancelled {
		t.Errorf("the queued run: %v (%v)", r, err)
	}
}

// readableRuns fails the test unless s holds every run of kept as it was
// stored.
func readableRuns(t *testing.T, s *Store, kept []small) {
	t.Helper()
	for _, k := range kept {
		r, err := s.Get("uid:2", k.id)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != api.RunDone || !bytes.Equal(r.Result, k.result) {
			t.Errorf("run %s: %s with result %.60s, want done with %.60s", k.id, r.Status, r.Result, k.result)
		}
		ev, err := s.Events("uid:2", k.id)
		if err != nil || !bytes.Equal(ev, k.events) {
			t.Errorf("run %s: events %.60q (%v), want %.60q", k.id, ev, err, k.events)
		}
		if got, err := s.Lookup("uid:2", "k"+k.id); err != nil || got == nil || got.ID != k.id {
			t.Errorf("key k%s: %v (%v), want run %s", k.id, got, err, k.id)
		}
	}
}

func fileSize(t *testing.T, path string) int64 {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Size()
}

// wchar is how many bytes this process has written (write(2), pwrite(2)
// and the like), whatever the file system does with them.
func wchar(t *testing.T) int64 {
	t.Helper()
	data, err := os.ReadFile("/proc/self/io")
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no wchar in /proc/self/io")
	return 0
}

// smallCommit is a submission's write, and the bytes it wrote.
func smallCommit(t *testing.T, s *Store, id string) int64 {
	t.Helper()
	before := wchar(t)
	if _, err := s.Create(&Record{ID: id, Owner: "uid:3", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	return wchar(t) - before
}

// Runs of large output grew the file far past what the store holds; once
// they were pruned, the file stayed that size, and every commit wrote the
// list of its free pages (a page id each): a peer's small submissions, at
// the store's pace, made the disk write tens of MB a second. The periodic
// Prune must give the space back, and a small commit after it write
// about what it does in a store that never held them, each run kept
// still readable, also after a restart.
func TestCompactAfterLargeRunsPruned(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, kept := wasteful(t, dir)
	defer func() { _ = s.Close() }()
	grown := fileSize(t, path)
	smallCommit(t, s, "warm") // the prune's pages are pending until a write
	wasted := smallCommit(t, s, "before")
	if _, err := s.Prune(time.Now()); err != nil {
		t.Fatal(err)
	}
	size := fileSize(t, path)
	smallCommit(t, s, "warm-again")
	after := smallCommit(t, s, "after")
	t.Logf("file: %d KiB, %d KiB after Prune; a small commit wrote %d KiB, then %d KiB", grown>>10, size>>10, wasted>>10, after>>10)
	if size > 4<<20 {
		t.Errorf("the file is %d KiB after its large runs were pruned (%d KiB before), want it back near what it holds", size>>10, grown>>10)
	}
	if after > 64<<10 || after > wasted/4 {
		t.Errorf("a small commit wrote %d KiB after the large runs were pruned (%d KiB before Prune), want it to write about its own pages", after>>10, wasted>>10)
	}
	readable(t, s, kept)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _ = open(t, dir, roomy)
	readable(t, s, kept)
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the compaction's copy is still there: %v", err)
	}
}

// A compaction holds neither the reads nor the writes for its copy (a
// copy under the store's writes held every peer's submissions and runs'
// ends for seconds, once a minute): a read while it copies is answered,
// a write committed, and the writes committed once the copy is made
// (a submission with a key, a run's end, a prune) are in the new file.
// Compactions are bounded in how often: a Prune within compactEvery of
// one does not copy again.
func TestCompactServesReadsAndWrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, kept := wasteful(t, dir)
	defer func() { _ = s.Close() }()
	gone, err := s.Get("uid:2", kept[0].id)
	if err != nil {
		t.Fatal(err)
	}
	var steps []string
	copies := 0
	var hookErr error
	compactHook = func(step string) {
		steps = append(steps, step)
		if copies > 0 { // the first compaction's alone
			return
		}
		switch step {
		case "renamed":
			copies++
		case "created":
			// Reads and a write while the compaction copies, on this
			// goroutine: one that waited for the compaction would never
			// return (the deadline says so).
			readable(t, s, kept)
			// Another Prune (a reload's) does not wait for this one,
			// nor make another.
			if _, err := s.Prune(time.Now().Add(2 * compactEvery)); err != nil || len(steps) != 1 {
				t.Errorf("a Prune during a compaction: steps %v (%v), want this compaction's alone", steps, err)
			}
			written := make(chan error, 1)
			go func() {
				_, err := s.Create(&Record{ID: "during", Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()})
				written <- err
			}()
			select {
			case hookErr = <-written:
			case <-time.After(30 * time.Second):
				hookErr = errors.New("a write during the compaction's copy waited for it")
			}
		case "copied":
			// Writes the copy cannot hold: made once it is.
			if _, err := s.Create(&Record{ID: "after", Owner: "uid:2", Key: "kafter", Sum: "s", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
				hookErr = err
			}
			if err := s.Finish("queued", api.RunDone, []byte(`{"id":"queued","status":"ok"}`), []byte("{}\n")); err != nil {
				hookErr = err
			}
			if n, err := s.prune(gone.EndedAt.Add(time.Hour)); err != nil || n != 1 {
				hookErr = fmt.Errorf("pruned %d (%v), want the oldest small run", n, err)
			}
		}
	}
	t.Cleanup(func() { compactHook = nil })
	grown := fileSize(t, path)
	now := time.Now()
	if _, err := s.Prune(now); err != nil {
		t.Fatal(err)
	}
	if hookErr != nil {
		t.Fatal(hookErr)
	}
	if want := []string{"created", "copied", "synced", "renamed"}; !slices.Equal(steps, want) {
		t.Fatalf("compaction steps %v, want %v", steps, want)
	}
	if size := fileSize(t, path); size >= grown/4 {
		t.Errorf("the file is %d KiB after a compaction, %d KiB before", size>>10, grown>>10)
	}
	during := func(s *Store) {
		t.Helper()
		readableRuns(t, s, kept[1:])
		for _, id := range []string{"during", "after"} {
			if r, err := s.Get("uid:2", id); err != nil || r.Status != api.RunQueued && r.Status != api.RunCancelled {
				t.Errorf("the write of %s during the compaction: %v (%v)", id, r, err)
			}
		}
		if r, err := s.Lookup("uid:2", "kafter"); err != nil || r == nil || r.ID != "after" {
			t.Errorf("the key written during the compaction: %v (%v)", r, err)
		}
		if r, err := s.Get("uid:2", "queued"); err != nil || r.Status != api.RunDone {
			t.Errorf("the run ended during the compaction: %v (%v)", r, err)
		}
		if ev, err := s.Events("uid:2", "queued"); err != nil || string(ev) != "{}\n" {
			t.Errorf("the events stored during the compaction: %q (%v)", ev, err)
		}
		if r, err := s.Get("uid:2", kept[0].id); !errors.Is(err, ErrNotFound) {
			t.Errorf("the run pruned during the compaction: %v (%v), want it gone", r, err)
		}
		if r, err := s.Lookup("uid:2", "k"+kept[0].id); err != nil || r != nil {
			t.Errorf("the key of the run pruned during the compaction: %v (%v), want it gone", r, err)
		}
	}
	during(s)
	// And as a restart finds them (a copy of the file, as it is between
	// two writes: the store keeps its own open).
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	again := t.TempDir()
	if err := os.WriteFile(filepath.Join(again, FileName), data, 0o600); err != nil {
		t.Fatal(err)
	}
	reopened, _ := open(t, again, roomy)
	during(reopened)
	if err := reopened.Close(); err != nil {
		t.Fatal(err)
	}
	// Waste again: a Prune within compactEvery does not compact.
	for i := range 10 {
		id := fmt.Sprintf("large-again-%d", i)
		res, ev := bigEnd(id)
		if _, err := s.Create(&Record{ID: id, Owner: "uid:1", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
			t.Fatal(err)
		}
		if err := s.Finish(id, api.RunDone, res, ev); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.prune(time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	steps = nil
	if _, err := s.Prune(now.Add(compactEvery / 2)); err != nil || len(steps) != 0 {
		t.Errorf("a Prune within compactEvery of a compaction: steps %v (%v), want none", steps, err)
	}
	if _, err := s.Prune(now.Add(compactEvery)); err != nil || len(steps) != 4 {
		t.Errorf("a Prune compactEvery after a compaction: steps %v (%v), want a compaction", steps, err)
	}
}

// A daemon killed at any step of a compaction leaves its store whole:
// the old file or the new one as runs.db, never the copy before it is
// whole and synced; the next start removes a copy left behind, and
// every run is there.
func TestCompactionKilled(t *testing.T) {
	if at := os.Getenv("RUNSTORE_KILL_AT"); at != "" {
		// The child: opening the store compacts it; it waits at the step
		// to be killed.
		compactHook = func(step string) {
			if step == at {
				fmt.Printf("at %s\n", step)
				time.Sleep(time.Hour) // until the parent kills it
			}
		}
		s, _, err := Open(os.Getenv("RUNSTORE_DIR"), roomy, "the daemon restarted")
		fmt.Printf("opened without compacting: %v\n", err)
		if err == nil {
			_ = s.Close()
		}
		return
	}
	for _, at := range []string{"created", "copied", "synced", "renamed"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			s, kept := wasteful(t, dir)
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			grown := fileSize(t, path)
			cmd := exec.Command(os.Args[0], "-test.run=^TestCompactionKilled$", "-test.count=1")
			cmd.Env = append(os.Environ(), "RUNSTORE_KILL_AT="+at, "RUNSTORE_DIR="+dir)
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stderr = os.Stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "at "+at+"\n" {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("the child said %q (%v), want it at step %s", line, err, at)
			}
			if err := cmd.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			_ = cmd.Wait()
			_, err = os.Stat(path + compactSuffix)
			if left := err == nil; left != (at != "renamed") {
				t.Errorf("killed at %s: the copy left behind: %v", at, left)
			}
			if size := fileSize(t, path); (size < grown/4) != (at == "renamed") {
				t.Errorf("killed at %s: runs.db is %d KiB, was %d KiB", at, size>>10, grown>>10)
			}
			s, _ = open(t, dir, roomy)
			defer func() { _ = s.Close() }()
			readable(t, s, kept)
			if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the copy is still there after a start: %v", err)
			}
			// The start compacts what the killed one did not.
			if size := fileSize(t, path); size >= grown/4 {
				t.Errorf("killed at %s: runs.db is %d KiB after a start, was %d KiB", at, size>>10, grown>>10)
			}
		})
	}
}

// A compaction that meets a damaged page (written over while the store
// is open) fails as any read of it does: ErrDamaged, for it and every
// later call, its copy removed, the old file left as it is for the next
// start to set aside.
func TestCompactDamaged(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, _ := wasteful(t, dir)
	defer func() { _ = s.Close() }()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	noise := make([]byte, fileSize(t, path)-2*4096)
	for i := range noise {
		noise[i] = byte(i*7 + 3)
	}
	if _, err := f.WriteAt(noise, 2*4096); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	var steps []string
	compactHook = func(step string) { steps = append(steps, step) }
	t.Cleanup(func() { compactHook = nil })
	if _, err := s.Prune(time.Now()); !errors.Is(err, ErrDamaged) || len(steps) == 0 {
		t.Fatalf("a compaction of a damaged file (steps %v): %v, want ErrDamaged", steps, err)
	}
	if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the copy of a damaged file is still there: %v", err)
	}
	if _, err := s.Get("uid:2", "small-1"); !errors.Is(err, ErrDamaged) {
		t.Errorf("a read after the compaction saw the damage: %v, want ErrDamaged", err)
	}
	if size := fileSize(t, path); size != int64(len(noise))+2*4096 {
		t.Errorf("the damaged file is %d bytes, was %d", size, len(noise)+2*4096)
	}
}

// The store closed (the daemon's shutdown) while a compaction copies:
// the close does not wait for the copy, the compaction gives up, its copy
// removed and the old file whole, and the next start compacts it.
func TestCompactClosedMeanwhile(t *testing.T) {
	for _, at := range []string{"created", "copied"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, FileName)
			s, kept := wasteful(t, dir)
			grown := fileSize(t, path)
			var closeErr error
			compactHook = func(step string) {
				if step == at {
					closeErr = s.Close()
				}
			}
			t.Cleanup(func() { compactHook = nil })
			if _, err := s.Prune(time.Now()); err == nil || errors.Is(err, ErrDamaged) {
				t.Errorf("a compaction of a store closed meanwhile: %v, want an error", err)
			}
			compactHook = nil
			if closeErr != nil {
				t.Fatal(closeErr)
			}
			if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the copy is left behind: %v", err)
			}
			if size := fileSize(t, path); size != grown {
				t.Errorf("runs.db is %d KiB, was %d KiB", size>>10, grown>>10)
			}
			s, _ = open(t, dir, roomy)
			defer func() { _ = s.Close() }()
			readable(t, s, kept)
			if size := fileSize(t, path); size >= grown/4 {
				t.Errorf("runs.db is %d KiB after a start, was %d KiB", size>>10, grown>>10)
			}
		})
	}
}

// A disk too full for the copy fails the compaction alone: its copy
// removed, runs.db as it was, every run readable; once there is room,
// writes go on and the next try (compactEvery later) compacts.
func TestCompactDiskFull(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, kept := wasteful(t, dir)
	defer func() { _ = s.Close() }()
	grown := fileSize(t, path)
	var steps []string
	var full *testing.T
	compactHook = func(step string) {
		steps = append(steps, step)
		if step == "created" && full != nil {
			// No file may grow past the copy's first pages (until the
			// subtest ends): the copy cannot hold the runs.
			capFiles(full, 32<<10)
		}
	}
	t.Cleanup(func() { compactHook = nil })
	now := time.Now()
	t.Run("full", func(t *testing.T) {
		full = t
		defer func() { full = nil }()
		if _, err := s.Prune(now); err == nil || errors.Is(err, ErrDamaged) {
			t.Errorf("a compaction on a full disk (steps %v): %v, want an error", steps, err)
		} else {
			t.Logf("the compaction: %v", err)
		}
		if !slices.Equal(steps, []string{"created"}) {
			t.Errorf("compaction steps %v, want it to stop at its copy", steps)
		}
		if _, err := os.Stat(path + compactSuffix); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the copy is left behind: %v", err)
		}
		if size := fileSize(t, path); size != grown {
			t.Errorf("runs.db is %d KiB, was %d KiB", size>>10, grown>>10)
		}
		readable(t, s, kept)
	})
	if _, err := s.Create(&Record{ID: "room-again", Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	steps = nil
	if _, err := s.Prune(now.Add(compactEvery)); err != nil || len(steps) != 4 {
		t.Fatalf("the next try, with room: steps %v (%v), want a compaction", steps, err)
	}
	if size := fileSize(t, path); size >= grown/4 {
		t.Errorf("runs.db is %d KiB after the next try, was %d KiB", size>>10, grown>>10)
	}
	readable(t, s, kept)
	if _, err := s.Get("uid:2", "room-again"); err != nil {
		t.Error(err)
	}
}
