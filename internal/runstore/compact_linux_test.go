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
	if r, err := s.Get("uid:2", "queued"); err != nil || r.Status != api.RunQueued && r.Status != api.RunCancelled {
		t.Errorf("the queued run: %v (%v)", r, err)
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

// A compaction holds the writes for its copy, not the reads: a read
// while it copies is answered, and a write that came meanwhile is
// committed (to the new file) once it is done. Compactions are bounded
// in how often: a Prune within compactEvery of one does not copy again.
func TestCompactServesReadsAndWrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, FileName)
	s, kept := wasteful(t, dir)
	defer func() { _ = s.Close() }()
	var steps []string
	written := make(chan error, 1)
	copies := 0
	compactHook = func(step string) {
		steps = append(steps, step)
		if step != "created" {
			return
		}
		if copies++; copies > 1 {
			return
		}
		// Reads while the compaction holds the store's writes, on this
		// goroutine: a read that waited for the compaction would never
		// return (the test's deadline says so).
		readable(t, s, kept)
		go func() {
			_, err := s.Create(&Record{ID: "during", Owner: "uid:2", Status: api.RunQueued, SubmittedAt: time.Now()})
			written <- err
		}()
		// Until that write waits for its commit.
		deadline := time.Now().Add(time.Minute)
		for {
			s.writes.mu.Lock()
			waiting := s.writes.leading
			s.writes.mu.Unlock()
			if waiting {
				break
			}
			if time.Now().After(deadline) {
				t.Error("the write never came")
				break
			}
			time.Sleep(time.Millisecond)
		}
		select {
		case err := <-written:
			t.Errorf("a write was committed during the copy (%v): the copy would miss it", err)
		default:
		}
	}
	t.Cleanup(func() { compactHook = nil })
	grown := fileSize(t, path)
	now := time.Now()
	if _, err := s.Prune(now); err != nil {
		t.Fatal(err)
	}
	if want := []string{"created", "synced", "renamed"}; !slices.Equal(steps, want) {
		t.Fatalf("compaction steps %v, want %v", steps, want)
	}
	if err := <-written; err != nil {
		t.Fatalf("the write that came during the compaction: %v", err)
	}
	if size := fileSize(t, path); size >= grown/4 {
		t.Errorf("the file is %d KiB after a compaction, %d KiB before", size>>10, grown>>10)
	}
	readable(t, s, kept)
	if r, err := s.Get("uid:2", "during"); err != nil || r.Status != api.RunQueued {
		t.Errorf("the write during the compaction: %v (%v)", r, err)
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
	if _, err := s.Prune(now.Add(compactEvery)); err != nil || len(steps) != 3 {
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
	for _, at := range []string{"created", "synced", "renamed"} {
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
