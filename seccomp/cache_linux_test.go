//go:build cgo

package seccomp

import (
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/testenv"
	"github.com/pmjail/pmjail/seccomp/bpf"
)

var cachePolicy = []byte(`{"defaultAction":"SCMP_ACT_ERRNO","defaultErrnoRet":13,"syscalls":[{"names":["read","write","exit_group"],"action":"SCMP_ACT_ALLOW"}]}`)

func cacheProgram(t *testing.T, opt Options) *bpf.Program {
	t.Helper()
	errno := uint(13)
	p := &specs.LinuxSeccomp{DefaultAction: specs.ActErrno, DefaultErrnoRet: &errno, Syscalls: []specs.LinuxSyscall{
		{Names: []string{"read", "write", "exit_group"}, Action: specs.ActAllow},
	}}
	prog, err := Compile(p, opt)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// entryPath stores policy's program under opt and returns the entry's path.
func entryPath(t *testing.T, c Cache, policy []byte, opt Options) string {
	t.Helper()
	if err := c.Store(policy, opt, cacheProgram(t, opt)); err != nil {
		t.Fatal(err)
	}
	k, err := keyOf(policy, opt)
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(c.Dir, hex.EncodeToString(k[:]))
}

func TestCacheRoundTrip(t *testing.T) {
	c := Cache{Dir: filepath.Join(t.TempDir(), "state", "seccomp")}
	opt := Options{Notify: true}
	if _, err := c.Load(cachePolicy, opt); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("empty cache: %v, want a miss", err)
	}
	want := cacheProgram(t, opt)
	if err := c.Store(cachePolicy, opt, want); err != nil {
		t.Fatal(err)
	}
	got, err := c.Load(cachePolicy, opt)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) || got.Errno != 13 {
		t.Fatalf("loaded %+v, want %+v", got, want)
	}

	st, err := os.Stat(c.Dir)
	if err != nil || st.Mode().Perm() != 0o700 {
		t.Fatalf("cache directory: %v %v, want mode 0700", st.Mode(), err)
	}
	files, _ := os.ReadDir(c.Dir)
	if len(files) != 1 {
		t.Fatalf("cache holds %v, want one entry and no temporary file", files)
	}
	if info, _ := files[0].Info(); info.Mode().Perm() != 0o600 {
		t.Fatalf("entry mode %v, want 0600", info.Mode())
	}

	// Whatever the output depends on is in the key.
	for _, tc := range []struct {
		policy []byte
		opt    Options
	}{
		{cachePolicy, Options{Log: true}},
		{cachePolicy, Options{Notify: true, AllowDangerous: []string{"ptrace"}}},
		{append([]byte(" "), cachePolicy...), opt},
	} {
		if _, err := c.Load(tc.policy, tc.opt); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%+v: %v, want a miss", tc.opt, err)
		}
	}
	// The allowed dangerous calls are a set: their order is not.
	a := Options{AllowDangerous: []string{"ptrace", "mount"}}
	if err := c.Store(cachePolicy, a, cacheProgram(t, a)); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Load(cachePolicy, Options{AllowDangerous: []string{"mount", "ptrace", "mount"}}); err != nil {
		t.Fatal(err)
	}
}

// An entry anyone but this uid could have written is never trusted, and
// nothing is written into a directory that is not trusted either.
func TestCacheIgnoresUntrusted(t *testing.T) {
	testenv.RequireRoot(t) // to give files away
	opt := Options{Notify: true}
	for _, tc := range []struct {
		name   string
		tamper func(t *testing.T, dir, entry string)
		store  bool // Store still succeeds (a fresh file replaces the entry)
	}{
		{"group-writable directory", func(t *testing.T, dir, _ string) { chmod(t, dir, 0o770) }, false},
		{"world-writable directory", func(t *testing.T, dir, _ string) { chmod(t, dir, 0o703) }, false},
		{"foreign directory", func(t *testing.T, dir, _ string) { chown(t, dir) }, false},
		{"symlinked directory", func(t *testing.T, dir, _ string) {
			moved := dir + ".real"
			if err := os.Rename(dir, moved); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(moved, dir); err != nil {
				t.Fatal(err)
			}
		}, false},
		{"group-writable entry", func(t *testing.T, _, entry string) { chmod(t, entry, 0o620) }, true},
		{"foreign entry", func(t *testing.T, _, entry string) { chown(t, entry) }, true},
		{"fifo entry", func(t *testing.T, _, entry string) {
			if err := os.Remove(entry); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mkfifo(entry, 0o600); err != nil {
				t.Fatal(err)
			}
		}, true},
		{"symlinked entry", func(t *testing.T, _, entry string) {
			if err := os.Rename(entry, entry+".real"); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(entry+".real", entry); err != nil {
				t.Fatal(err)
			}
		}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Cache{Dir: filepath.Join(t.TempDir(), "seccomp")}
			entry := entryPath(t, c, cachePolicy, opt)
			tc.tamper(t, c.Dir, entry)
			_, err := c.Load(cachePolicy, opt)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Load: %v, want the entry refused", err)
			}
			t.Log(err)
			err = c.Store(cachePolicy, opt, cacheProgram(t, opt))
			if tc.store != (err == nil) {
				t.Fatalf("Store: %v", err)
			}
			if tc.store {
				if _, err := c.Load(cachePolicy, opt); err != nil {
					t.Fatalf("after Store: %v", err)
				}
			}
		})
	}
}

func TestCacheRefusesCorruptEntries(t *testing.T) {
	opt := Options{Notify: true}
	for _, tc := range []struct {
		name   string
		mangle func(b []byte) []byte
	}{
		{"empty", func([]byte) []byte { return nil }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-3] }},
		{"magic", func(b []byte) []byte { b[0] ^= 1; return b }},
		{"key", func(b []byte) []byte { b[len(cacheMagic)] ^= 1; return b }},
		{"errno", func(b []byte) []byte { copy(b[cacheHead-4:], []byte{0, 0, 0, 0}); return b }},
		{"program", func(b []byte) []byte { b[cacheHead] ^= 1; return b }},
		{"notify", func(b []byte) []byte { b[cacheHead+len("PMJSECC2")] = 0; return b }},
		{"oversized", func(b []byte) []byte { return append(b, make([]byte, 8*bpf.MaxInsns)...) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Cache{Dir: filepath.Join(t.TempDir(), "seccomp")}
			entry := entryPath(t, c, cachePolicy, opt)
			b, err := os.ReadFile(entry)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(entry, tc.mangle(b), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err = c.Load(cachePolicy, opt)
			if err == nil || errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("Load: %v, want the entry refused", err)
			}
			t.Log(err)
			if err := c.Store(cachePolicy, opt, cacheProgram(t, opt)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Load(cachePolicy, opt); err != nil {
				t.Fatalf("rewritten: %v", err)
			}
		})
	}
}

func TestCacheStaysBounded(t *testing.T) {
	defer func(n int) { cacheEntries = n }(cacheEntries)
	cacheEntries = 4
	c := Cache{Dir: filepath.Join(t.TempDir(), "seccomp")}
	if err := os.Mkdir(c.Dir, 0o700); err != nil {
		t.Fatal(err)
	}
	// Six entries of other builds, the oldest first.
	old := time.Now().Add(-time.Hour)
	for i, name := range []string{"a", "b", "c", "d", "e", ".tmp-f"} {
		path := filepath.Join(c.Dir, name)
		if err := os.WriteFile(path, []byte("x"), 0o600); err != nil {
			t.Fatal(err)
		}
		mtime := old.Add(time.Duration(i) * time.Minute)
		if err := os.Chtimes(path, mtime, mtime); err != nil {
			t.Fatal(err)
		}
	}
	opt := Options{Notify: true}
	if err := c.Store(cachePolicy, opt, cacheProgram(t, opt)); err != nil {
		t.Fatal(err)
	}
	left, _ := os.ReadDir(c.Dir)
	if len(left) != 4 {
		t.Fatalf("left %v, want the newest 3 and the new entry", left)
	}
	for _, gone := range []string{"a", "b", "c"} {
		if _, err := os.Lstat(filepath.Join(c.Dir, gone)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s kept: %v", gone, err)
		}
	}
	if _, err := c.Load(cachePolicy, opt); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

// chown gives path to nobody.
func chown(t *testing.T, path string) {
	t.Helper()
	if err := os.Lchown(path, 65534, 65534); err != nil {
		t.Fatal(err)
	}
}
