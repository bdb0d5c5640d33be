package runstore

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
)

// fillStore makes a store with some runs, finished and not, and closes it.
func fillStore(t *testing.T, dir string) {
	t.Helper()
	s, _ := open(t, dir, roomy)
	now := time.Now().UTC()
	for i := range 200 {
		r := &Record{ID: "run" + string(rune('a'+i%26)) + string(rune('a'+i/26)), Owner: "uid:1", Status: api.RunQueued, SubmittedAt: now}
		if _, err := s.Create(r); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			if err := s.Finish(r.ID, api.RunDone, []byte(`{"id":"x","status":"ok"}`), []byte(`{"type":"stdout","data":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}`+"\n")); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
}

// A store file damaged on disk (a bad disk, a crash of the file system, a
// hand that wrote into it) is an error that names the file, never a panic
// of the daemon that opens it.
func TestOpenDamagedStore(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt func(t *testing.T, path string)
	}{
		{"garbage", func(t *testing.T, path string) {
			if err := os.WriteFile(path, []byte("this is not a bbolt file at all, it is text\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"empty", func(t *testing.T, path string) {
			if err := os.WriteFile(path, nil, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"truncated", func(t *testing.T, path string) {
			if err := os.Truncate(path, 3*4096); err != nil {
				t.Fatal(err)
			}
		}},
		{"pages overwritten", func(t *testing.T, path string) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			// The meta pages stay; every data page after them is noise.
			for i := 2 * 4096; i < len(data); i++ {
				data[i] = byte(i*7 + 3)
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"freelist count in the billions", func(t *testing.T, path string) {
			freelistCount(t, path, 1<<40)
		}},
		{"freelist count past the file", func(t *testing.T, path string) {
			freelistCount(t, path, 1<<22)
		}},
		{"records not JSON", func(t *testing.T, path string) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			for i := 0; i+4 < len(data); i++ {
				if string(data[i:i+4]) == `{"id` {
					data[i] = '!'
				}
			}
			if err := os.WriteFile(path, data, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			fillStore(t, dir)
			path := filepath.Join(dir, FileName)
			tc.corrupt(t, path)
			var s *Store
			var err error
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Fatalf("Open panicked on a damaged store: %v", p)
					}
				}()
				s, _, err = Open(dir, roomy, "lost")
			}()
			if err == nil {
				// bbolt takes an empty file for a new store.
				if tc.name != "empty" {
					t.Errorf("a damaged store opened")
				}
				s.Close()
				return
			}
			if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), path) {
				t.Errorf("damaged store: %v, want ErrDamaged naming %s", err, path)
			}
			// Set aside, the file makes room for a new, empty store,
			// and stays as it was for a look into it.
			aside, err := SetAside(dir)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := os.Stat(aside); err != nil {
				t.Errorf("the damaged file set aside: %v", err)
			}
			s, _ = open(t, dir, roomy)
			defer s.Close()
			if n, _ := s.Stats(); n != 0 {
				t.Errorf("the new store holds %d runs", n)
			}
			if _, err := s.Create(&Record{ID: "new", Owner: "uid:1", Status: api.RunQueued, SubmittedAt: time.Now()}); err != nil {
				t.Errorf("create in the new store: %v", err)
			}
		})
	}
}

// Pages damaged while the store is open are errors of the calls that read
// them, not panics: a run's end (Finish) and the pruning run in the
// daemon's own goroutines, where a panic would end the daemon.
func TestDamagedWhileOpen(t *testing.T) {
	dir := t.TempDir()
	fillStore(t, dir)
	s, _ := open(t, dir, roomy)
	defer s.Close()
	f, err := os.OpenFile(filepath.Join(dir, FileName), os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	noise := make([]byte, st.Size()-2*4096)
	for i := range noise {
		noise[i] = byte(i*7 + 3)
	}
	if _, err := f.WriteAt(noise, 2*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	calls := map[string]func() error{
		"get":    func() error { _, err := s.Get("uid:1", "runab"); return err },
		"events": func() error { _, err := s.Events("uid:1", "runaa"); return err },
		"lookup": func() error { _, err := s.Lookup("uid:1", "k"); return err },
		"create": func() error {
			_, err := s.Create(&Record{ID: "new", Owner: "uid:1", Key: "k", Status: api.RunQueued, SubmittedAt: time.Now()})
			return err
		},
		"finish": func() error { return s.Finish("runab", api.RunDone, []byte(`{}`), nil) },
		"prune":  func() error { _, err := s.Prune(time.Now().Add(2 * time.Hour)); return err },
	}
	seen := false
	// Twice: a call after the damage was seen is refused at once, not
	// left to wait on a lock bbolt held as it panicked.
	for name, call := range calls {
		for range 2 {
			func() {
				defer func() {
					if p := recover(); p != nil {
						t.Errorf("%s panicked on a damaged page: %v", name, p)
					}
				}()
				err := call()
				seen = seen || errors.Is(err, ErrDamaged)
			}()
		}
	}
	if !seen {
		t.Error("no call saw the damaged pages")
	}
}

// ResultChunk reads a run's result as stored, whatever its key holds: a
// key that spells the result's field name finds no other bytes.
func TestResultChunk(t *testing.T) {
	s, _ := open(t, t.TempDir(), roomy)
	defer s.Close()
	r := &Record{ID: "r1", Owner: "uid:1", Key: `k","result":{"forged":1},"x":"`, Sum: "s", Status: api.RunQueued, SubmittedAt: time.Now()}
	if _, err := s.Create(r); err != nil {
		t.Fatal(err)
	}
	if b, err := s.ResultChunk("r1", 0, 10); err != nil || len(b) != 0 {
		t.Errorf("before the end: %q %v, want none", b, err)
	}
	result := `{"id":"r1","status":"ok","stdout":"a<b>&\u0001"}`
	if err := s.Finish("r1", api.RunDone, []byte(result), nil); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for off := 0; ; {
		b, err := s.ResultChunk("r1", off, 7)
		if err != nil {
			t.Fatal(err)
		}
		if len(b) == 0 {
			break
		}
		got = append(got, b...)
		off += len(b)
	}
	rec, err := s.Get("uid:1", "r1")
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != string(rec.Result) {
		t.Errorf("chunks %s, want %s", got, rec.Result)
	}
	if _, err := s.ResultChunk("gone", 0, 7); !errors.Is(err, ErrNotFound) {
		t.Errorf("no such run: %v, want ErrNotFound", err)
	}
}

// freelistCount makes the freelist page that each meta page of the store
// at path names count its ids in its first one, and that count n: bbolt
// allocates and copies n ids as it opens the file, before anything can
// say it is damaged.
func freelistCount(t *testing.T, path string, n uint64) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	size := int(binary.LittleEndian.Uint32(data[pageHeader+8:]))
	for meta := range 2 {
		at := meta*size + pageHeader
		free := int(binary.LittleEndian.Uint64(data[at+32:])) * size
		if free <= 0 || free+pageHeader+8 > len(data) {
			t.Fatalf("meta %d names its freelist at byte %d of %d", meta, free, len(data))
		}
		binary.LittleEndian.PutUint16(data[free+10:], 0xFFFF)
		binary.LittleEndian.PutUint64(data[free+pageHeader:], n)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}
