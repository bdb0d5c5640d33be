package seccomp

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/seccomp/bpf"
)

// Cache keeps compiled programs in a directory, so that a one-shot
// supervisor (the CLI) that has compiled a policy before neither decodes it
// again nor calls libseccomp (~1 ms of every run).
//
// An entry is named by a hash of everything Compile's output depends on:
// the policy's bytes, the Options, this pmjail binary (the compiler and its
// dangerous-call rules live in it), the libseccomp version and API level,
// and the kernel. A tampered entry would silently weaken the jail, so one
// is trusted only in a directory and a file owned by the effective uid and
// writable by no one else; otherwise the caller compiles.
type Cache struct {
	// Dir is the cache directory, made 0700 by the first Store.
	Dir string
}

// cacheEntries bounds the directory: Store removes the oldest entries
// beyond it. Other builds' and kernels' entries age out this way, without
// two builds that share a state directory evicting each other's at every
// run (a few entries per profile and build).
var cacheEntries = 64

const (
	cacheMagic = "PMJSCCE1"
	// An entry is the magic, the key, the errno (u32) and the marshalled
	// program: its header (20 bytes) and 1..MaxInsns instructions.
	cacheHead   = len(cacheMagic) + sha256.Size + 4
	cacheMinLen = cacheHead + 20 + 8
	cacheMaxLen = cacheHead + 20 + 8*bpf.MaxInsns
)

type cacheKey [sha256.Size]byte

// buildIdentity names what, besides the policy and options, decides
// Compile's output. /proc/self/exe is the running image even when its path
// has since been replaced, so a daemon keeps its own key across upgrades.
var buildIdentity = sync.OnceValues(func() ([]byte, error) {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/exe", &st); err != nil {
		return nil, fmt.Errorf("seccomp cache: identify pmjail binary: %w", os.NewSyscallError("stat", err))
	}
	var uts unix.Utsname
	if err := unix.Uname(&uts); err != nil {
		return nil, fmt.Errorf("seccomp cache: identify kernel: %w", os.NewSyscallError("uname", err))
	}
	// The change time as well as the modification time: no one can set it
	// back, so a binary rewritten in place never passes for the old one.
	return fmt.Appendf(nil, "exe %d:%d %d %d %d\x00libseccomp %s\x00kernel %s %s\x00",
		st.Dev, st.Ino, st.Size, st.Mtim.Nano(), st.Ctim.Nano(), libraryVersion(),
		unix.ByteSliceToString(uts.Release[:]), unix.ByteSliceToString(uts.Version[:])), nil
})

func keyOf(policy []byte, opt Options) (cacheKey, error) {
	id, err := buildIdentity()
	if err != nil {
		return cacheKey{}, err
	}
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	field([]byte(cacheMagic))
	field(id)
	field(fmt.Appendf(nil, "notify %t log %t", opt.Notify, opt.Log))
	allowed := slices.Clone(opt.AllowDangerous)
	slices.Sort(allowed)
	for _, name := range slices.Compact(allowed) {
		field([]byte(name))
	}
	field(policy)
	var k cacheKey
	h.Sum(k[:0])
	return k, nil
}

// Load returns the program compiled from policy (the policy's bytes as
// stored) under opt, with its Errno. A missing entry is an error matching
// fs.ErrNotExist; any other error means an entry, or the directory, that
// must not be used: the caller compiles, and may Store over it.
func (c Cache) Load(policy []byte, opt Options) (*bpf.Program, error) {
	k, err := keyOf(policy, opt)
	if err != nil {
		return nil, err
	}
	dir, err := c.openDir()
	if err != nil {
		return nil, err
	}
	defer dir.Close()
	name := hex.EncodeToString(k[:])
	path := filepath.Join(c.Dir, name)
	// O_NONBLOCK: a FIFO in its place fails the type check below instead
	// of hanging the run.
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("read seccomp cache %s: %w", path, os.NewSyscallError("openat", err))
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	size, err := checkOwned(f, unix.S_IFREG)
	if err != nil {
		return nil, err
	}
	if size < int64(cacheMinLen) || size > int64(cacheMaxLen) {
		return nil, fmt.Errorf("read seccomp cache %s: %d bytes, want %d..%d", path, size, cacheMinLen, cacheMaxLen)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(f, b); err != nil {
		return nil, fmt.Errorf("read seccomp cache %s: %w", path, err)
	}
	prog, err := decodeEntry(b, k)
	if err != nil {
		return nil, fmt.Errorf("read seccomp cache %s: %w", path, err)
	}
	if prog.Notify != opt.Notify {
		return nil, fmt.Errorf("read seccomp cache %s: notify %t, want %t", path, prog.Notify, opt.Notify)
	}
	return prog, nil
}

func decodeEntry(b []byte, k cacheKey) (*bpf.Program, error) {
	if string(b[:len(cacheMagic)]) != cacheMagic {
		return nil, errors.New("not a seccomp cache entry")
	}
	if string(b[len(cacheMagic):len(cacheMagic)+sha256.Size]) != string(k[:]) {
		return nil, errors.New("entry for another key")
	}
	errno := unix.Errno(binary.NativeEndian.Uint32(b[cacheHead-4:]))
	if errno == 0 || errno > 4095 {
		return nil, fmt.Errorf("errno %d out of range 1..4095", errno)
	}
	var prog bpf.Program
	if err := prog.UnmarshalBinary(b[cacheHead:]); err != nil {
		return nil, err
	}
	prog.Errno = errno
	return &prog, nil
}

// Store records prog, compiled from policy under opt, replacing any entry
// atomically, and removes the oldest entries beyond the cache's bound. It
// writes nothing into a directory Load would not trust.
func (c Cache) Store(policy []byte, opt Options, prog *bpf.Program) error {
	k, err := keyOf(policy, opt)
	if err != nil {
		return err
	}
	b, err := prog.MarshalBinary()
	if err != nil {
		return err
	}
	entry := make([]byte, 0, cacheHead+len(b))
	entry = append(entry, cacheMagic...)
	entry = append(entry, k[:]...)
	entry = binary.NativeEndian.AppendUint32(entry, uint32(prog.Errno))
	entry = append(entry, b...)

	// The state directory is shared with the runtimes' caches (0755, as
	// they make it); only this directory need be private.
	if err := os.MkdirAll(filepath.Dir(c.Dir), 0o755); err != nil {
		return fmt.Errorf("write seccomp cache: %w", err)
	}
	if err := os.Mkdir(c.Dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("write seccomp cache: %w", err)
	}
	dir, err := c.openDir()
	if err != nil {
		return err
	}
	defer dir.Close()
	dfd := int(dir.Fd())
	name := hex.EncodeToString(k[:])
	tmp := ".tmp-" + name[:16] + "-" + rand.Text()[:8]
	path := filepath.Join(c.Dir, name)
	// Everything below is relative to the directory checked above, so a
	// directory swapped in meanwhile is never written to.
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("write seccomp cache %s: %w", path, os.NewSyscallError("openat", err))
	}
	f := os.NewFile(uintptr(fd), filepath.Join(c.Dir, tmp))
	_, err = f.Write(entry)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// No fsync: a torn entry after a crash fails Load's checks and is
		// compiled and written again.
		err = os.NewSyscallError("renameat", unix.Renameat(dfd, tmp, dfd, name))
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return fmt.Errorf("write seccomp cache %s: %w", path, err)
	}
	prune(dir, name)
	return nil
}

// prune removes the oldest files beyond cacheEntries, never keep (the
// entry just written). Best effort: a failure leaves a few files more.
func prune(dir *os.File, keep string) {
	names, err := dir.Readdirnames(-1)
	if err != nil || len(names) <= cacheEntries {
		return
	}
	type file struct {
		name  string
		mtime int64
	}
	var files []file
	for _, name := range names {
		var st unix.Stat_t
		if name == keep || unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		files = append(files, file{name, st.Mtim.Nano()})
	}
	if len(files) < cacheEntries {
		return
	}
	sort.Slice(files, func(i, j int) bool { return files[i].mtime > files[j].mtime })
	for _, f := range files[cacheEntries-1:] {
		_ = unix.Unlinkat(int(dir.Fd()), f.name, 0)
	}
}

// openDir opens the cache directory itself, never a symlink, and checks
// that it can be trusted.
func (c Cache) openDir() (*os.File, error) {
	dir, err := os.OpenFile(c.Dir, os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, fmt.Errorf("open seccomp cache: %w", err)
	}
	if _, err := checkOwned(dir, unix.S_IFDIR); err != nil {
		dir.Close()
		return nil, err
	}
	return dir, nil
}

// checkOwned checks that f is of the file type typ, owned by the effective
// uid and writable by no one else, and returns its size.
func checkOwned(f *os.File, typ uint32) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return 0, fmt.Errorf("seccomp cache %s: %w", f.Name(), os.NewSyscallError("fstat", err))
	}
	switch euid := uint32(os.Geteuid()); {
	case st.Mode&unix.S_IFMT != typ:
		return 0, fmt.Errorf("seccomp cache %s: not trusted: file type %#o", f.Name(), st.Mode&unix.S_IFMT)
	case st.Uid != euid:
		return 0, fmt.Errorf("seccomp cache %s: not trusted: owned by uid %d, not %d", f.Name(), st.Uid, euid)
	case st.Mode&0o022 != 0:
		return 0, fmt.Errorf("seccomp cache %s: not trusted: mode %#o is writable by group or others", f.Name(), st.Mode&0o7777)
	}
	return st.Size, nil
}
