package rootfs

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/sweep"
)

// libraryLinksDir is where, under a state directory, linkLibraries keeps
// its trees.
const libraryLinksDir = "libs"

// treeNameLen is the length of a tree's name: hex of half a SHA-256.
const treeNameLen = 32

// treePrefix starts every tree's name: a change to how trees are made
// changes it, and a prune removes the trees of other versions.
const treePrefix = "2-"

// Link binds the libraries from a tree of hard links to them under the
// state directory stateDir, made now or by an earlier run: the root then
// binds the tree's top-level directories (/lib, /lib64) in place of each
// library. Where no tree may stand for them (private libraries, a path of
// the root inside a library directory, a state directory on another file
// system or one others could change, see linkLibraries), it returns why
// and leaves the spec as it was, each library bound by itself: a run
// works either way, with more mounts.
func (s *Spec) Link(stateDir string) error {
	if stateDir == "" {
		return errors.New("link libraries: no state directory")
	}
	if s.private {
		// A tree links only files of the library directories (linkable):
		// a program with its own, private, libraries binds each file.
		return errors.New("link libraries: the program loads private libraries")
	}
	tops, err := treeTops(s.libs, s.others)
	if err != nil {
		return fmt.Errorf("link libraries: %w", err)
	}
	end := s.libsAt + len(s.libs)
	if end > len(s.Mounts) || slices.ContainsFunc(s.Mounts[s.libsAt:end], func(m specs.Mount) bool {
		return m.Type != "bind" || m.Source != m.Destination || !slices.Contains(s.libs, m.Source)
	}) {
		return errors.New("link libraries: the libraries' own binds are no longer where NewSpec put them")
	}
	tree, err := linkLibraries(stateDir, s.libs, hostSearch.dirsFor(s.libs...))
	if err != nil {
		return err
	}
	opts := s.Mounts[s.libsAt].Options
	mounts := make([]specs.Mount, 0, len(tops))
	for _, top := range tops {
		mounts = append(mounts, specs.Mount{Destination: top, Type: "bind", Source: filepath.Join(tree, top), Options: opts})
	}
	s.Mounts = slices.Replace(s.Mounts, s.libsAt, end, mounts...)
	s.libs = nil // bound from the tree now
	return nil
}

// linkLibraries returns a directory under stateDir that holds, at each
// library's own path, a hard link to it: a job's root then binds its
// top-level directories (/lib, /lib64) instead of every library, two
// mounts to make and tear down instead of nine for Deno. A tree is named
// by the paths and inodes of the files it links, so a library replaced on
// the host (an upgrade) names a new tree: the old one links the old file
// and is never bound again (PruneLinks removes it).
//
// A link makes a file reachable wherever its tree is, so only what any
// local user could read already is linked (see linkable), into a tree
// whose every parent only this user can change and everyone can pass (the
// init stage opens it under the job's unprivileged ids). Anything else is
// an error, and the caller binds each library by itself.
func linkLibraries(stateDir string, libs, allowedDirs []string) (string, error) {
	if len(libs) == 0 {
		return "", errors.New("link libraries: none to link")
	}
	if _, ok := linkRefused.Load(stateDir); ok {
		return "", fmt.Errorf("link libraries: links from %s refused before: %w", stateDir, unix.EXDEV)
	}
	state, err := trustedPath(stateDir)
	if err != nil {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	ids := make([]fileID, len(libs))
	h := sha256.New()
	for i, lib := range libs {
		var st unix.Stat_t
		if err := unix.Stat(lib, &st); err != nil {
			return "", fmt.Errorf("link libraries: %w", &os.PathError{Op: "stat", Path: lib, Err: err})
		}
		if err := linkable(lib, &st, allowedDirs); err != nil {
			return "", fmt.Errorf("link libraries: %w", err)
		}
		// Hard links cannot cross file systems.
		if st.Dev != state.Dev {
			return "", fmt.Errorf("link libraries: %s is on another file system than %s: %w", lib, stateDir, unix.EXDEV)
		}
		ids[i] = idOf(&st)
		h.Write([]byte(lib))
		h.Write([]byte{0})
		h.Write(ids[i].bytes())
	}
	parent := filepath.Join(stateDir, libraryLinksDir)
	dir := filepath.Join(parent, treePrefix+hex.EncodeToString(h.Sum(nil))[:treeNameLen])
	// The common case: made by an earlier run, and trusted as it stands.
	err = checkPrivate(parent)
	if err == nil {
		if err = checkPrivate(dir); err == nil {
			return dir, nil
		}
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	// Jobs pass through it; no one need list it.
	if err := makeDir(parent, 0o711); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	if err := checkPrivate(parent); err != nil {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, ".tmp-")
	if err != nil {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	defer os.RemoveAll(tmp) // gone once renamed; else what a failure left
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	for i, lib := range libs {
		real, err := reachable(lib)
		if err != nil {
			return "", fmt.Errorf("link libraries: %w", err)
		}
		link := filepath.Join(tmp, lib)
		if err := makeDirs(tmp, filepath.Dir(lib)); err != nil {
			return "", fmt.Errorf("link libraries: %w", err)
		}
		// The file reachable checked, not whatever a symlink names now.
		if err := unix.Linkat(unix.AT_FDCWD, real, unix.AT_FDCWD, link, 0); err != nil {
			if errors.Is(err, unix.EXDEV) {
				linkRefused.Store(stateDir, true) // another mount of the same file system
			}
			return "", fmt.Errorf("link libraries: %w", &os.LinkError{Op: "link", Old: real, New: link, Err: err})
		}
		// A library replaced between the stat and the link would be
		// linked under the old one's name, unchecked.
		var st unix.Stat_t
		if err := unix.Lstat(link, &st); err != nil || idOf(&st) != ids[i] {
			return "", fmt.Errorf("link libraries: %s changed while it was linked", lib)
		}
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another run made the same tree meanwhile.
		if checkPrivate(dir) == nil {
			return dir, nil
		}
		return "", fmt.Errorf("link libraries: %w", err)
	}
	return dir, nil
}

// linkable accepts what a run's stat shows of a library any local user
// could read where it is: a regular file owned by root, readable and not
// writable by others, not set-id, under one of allowedDirs (the loader's
// search directories).
func linkable(lib string, st *unix.Stat_t, allowedDirs []string) error {
	if err := inLibraryDirs(lib, allowedDirs); err != nil {
		return err
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file", lib)
	case st.Uid != 0:
		return fmt.Errorf("%s is owned by uid %d, not root", lib, st.Uid)
	case st.Mode&(unix.S_ISUID|unix.S_ISGID) != 0:
		return fmt.Errorf("%s is set-id", lib)
	case st.Mode&0o004 == 0 || st.Mode&0o022 != 0:
		return fmt.Errorf("%s has mode %#o: want readable and not writable by others", lib, st.Mode&0o777)
	}
	return nil
}

// reachable checks, as a tree is made, the file lib names (returned,
// symlinks resolved): others can pass every directory above it, so a link
// opens no way into a closed one, and it has no file capabilities to keep
// alive after an upgrade.
func reachable(lib string) (string, error) {
	real, err := filepath.EvalSymlinks(lib)
	if err != nil {
		return "", err
	}
	if _, err := unix.Lgetxattr(real, "security.capability", nil); !errors.Is(err, unix.ENODATA) && !errors.Is(err, unix.ENOTSUP) {
		return "", fmt.Errorf("%s has file capabilities (or they cannot be read: %v)", real, err)
	}
	if _, err := walkUp(filepath.Dir(real), passable); err != nil {
		return "", err
	}
	return real, nil
}

// linkRefused remembers the state directories a hard link from a library
// failed with EXDEV although the devices matched (another mount of the
// same file system): that will not change, so a daemon stops trying.
var linkRefused sync.Map

// trustedPath accepts dir when no one but root and this user can replace
// it or any directory above it (a writable one must be sticky, as /tmp,
// so that others cannot rename what root owns in it), and when others
// can pass through each; it returns dir's own lstat. It is checked at
// every run (a handful of lstats): a directory under /tmp can be removed
// and made again by someone else.
func trustedPath(dir string) (*unix.Stat_t, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	return walkUp(abs, changeableOnlyBy(uint32(os.Geteuid())))
}

// changeableOnlyBy accepts a directory that no one but root and uid can
// replace or change (a writable one must be sticky, as /tmp, so that
// others cannot rename what is theirs in it) and that others can pass.
func changeableOnlyBy(uid uint32) func(d string, st *unix.Stat_t) error {
	return func(d string, st *unix.Stat_t) error {
		switch {
		case st.Uid != 0 && st.Uid != uid:
			return fmt.Errorf("%s is owned by uid %d", d, st.Uid)
		case st.Mode&0o022 != 0 && st.Mode&unix.S_ISVTX == 0:
			return fmt.Errorf("%s is writable by others (mode %#o)", d, st.Mode&0o777)
		}
		return passable(d, st)
	}
}

// privateLibrary accepts a library that only a program's own search path
// leads to, outside the library directories: the program's headers chose
// where it is, so only what root or the program's owner put there is
// bound, and it stays what was checked until the job's set-up binds it. It
// must be a regular file (no symbolic link) that only root or that owner
// can change, in directories that only they can change (real ones, no
// symbolic link) and others can pass (the job's ids bind it).
func privateLibrary(lib string, owner uint32) error {
	var st unix.Stat_t
	if err := unix.Lstat(lib, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: lib, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG:
		return fmt.Errorf("%s is not a regular file", lib)
	case st.Uid != 0 && st.Uid != owner:
		return fmt.Errorf("%s is owned by uid %d, neither root nor the program's owner", lib, st.Uid)
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %#o)", lib, st.Mode&0o777)
	}
	_, err := walkUp(filepath.Dir(lib), changeableOnlyBy(owner))
	return err
}

// walkUp applies check to dir and every directory above it, each a real
// directory (no symlink: dir is resolved), and returns dir's own lstat.
func walkUp(dir string, check func(d string, st *unix.Stat_t) error) (*unix.Stat_t, error) {
	var first *unix.Stat_t
	for d := dir; ; d = filepath.Dir(d) {
		st, err := lstatDir(d)
		if err != nil {
			return nil, err
		}
		if err := check(d, st); err != nil {
			return nil, err
		}
		if first == nil {
			first = st
		}
		if d == "/" {
			return first, nil
		}
	}
}

// passable accepts a directory others may pass through: the job's ids
// reach the libraries through it.
func passable(d string, st *unix.Stat_t) error {
	if st.Mode&0o001 == 0 {
		return fmt.Errorf("%s is closed to others (mode %#o)", d, st.Mode&0o777)
	}
	return nil
}

// fileID names a library's version. A link is the file itself, so an
// edit in place shows through it; a replaced file is another inode (the
// old one lives on in the link). Times are left out: making a link
// changes the file's ctime.
type fileID struct{ dev, ino uint64 }

func idOf(st *unix.Stat_t) fileID { return fileID{uint64(st.Dev), st.Ino} }

func (id fileID) bytes() []byte {
	return binary.LittleEndian.AppendUint64(binary.LittleEndian.AppendUint64(nil, id.dev), id.ino)
}

// checkPrivate accepts a real directory (no symlink) that this process's
// user owns, no one else may write and everyone may pass: every job's
// libraries are bound from it.
func checkPrivate(dir string) error {
	st, err := lstatDir(dir)
	if err != nil {
		return err
	}
	switch {
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, not %d", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %#o)", dir, st.Mode&0o777)
	}
	return passable(dir, st)
}

// lstatDir is the lstat of a real directory (no symlink).
func lstatDir(dir string) (*unix.Stat_t, error) {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil, fmt.Errorf("%s is not a directory", dir)
	}
	return &st, nil
}

// makeDir makes dir with mode whatever the umask.
func makeDir(dir string, mode os.FileMode) error {
	if err := os.Mkdir(dir, mode); err != nil {
		return err
	}
	return os.Chmod(dir, mode)
}

// makeDirs makes each directory of path (absolute) below root.
func makeDirs(root, path string) error {
	d := root
	for _, part := range strings.Split(strings.TrimPrefix(path, "/"), "/") {
		d = filepath.Join(d, part)
		if err := makeDir(d, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
	}
	return nil
}

// tmpTreeAge is how old a half-made tree must be before a prune takes it
// for one a killed run left.
const tmpTreeAge = time.Hour

// PruneLinks removes, under stateDir, the trees of links to libraries
// that link a file no longer at its path (replaced by an upgrade, or
// removed): no run names them again, and their links keep the old files'
// blocks. It also removes half-made trees an hour old, and trees of
// another version's making. `pmjail prepare` and the daemon's start call
// it; a run that took such a tree a moment before loses its libraries, so
// runs never prune. It returns what it removed.
func PruneLinks(stateDir string) []string {
	parent := filepath.Join(stateDir, libraryLinksDir)
	if _, err := trustedPath(stateDir); err != nil || checkPrivate(parent) != nil {
		return nil
	}
	// Everything below goes through the directory opened here, the one
	// just checked, so no path swapped meanwhile is followed out of it.
	before, err := os.Lstat(parent)
	if err != nil {
		return nil
	}
	root, err := os.OpenRoot(parent)
	if err != nil {
		return nil
	}
	defer root.Close()
	if opened, err := root.Stat("."); err != nil || !os.SameFile(before, opened) {
		return nil
	}
	var removed []string
	for _, name := range sweep.Dir(root, func(name string, st fs.FileInfo) bool {
		switch {
		case strings.HasPrefix(name, ".tmp-"):
			return time.Since(st.ModTime()) > tmpTreeAge
		case strings.HasPrefix(name, treePrefix) && isTreeName(name[len(treePrefix):]):
			return staleTree(root, name)
		default: // a tree of another version's making
			return isTreeName(name) || isTreeName(name[strings.IndexByte(name, '-')+1:])
		}
	}, nil) {
		removed = append(removed, filepath.Join(parent, name))
	}
	return removed
}

// staleTree reports whether a file in the tree is no longer the one at
// its path on the host.
func staleTree(root *os.Root, name string) bool {
	stale := false
	_ = fs.WalkDir(root.FS(), name, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		link, err := root.Lstat(path)
		if err != nil {
			return nil
		}
		host, err := os.Stat(strings.TrimPrefix(path, name))
		if err != nil || !os.SameFile(link, host) {
			stale = true
			return fs.SkipAll
		}
		return nil
	})
	return stale
}

// isTreeName says whether s is the hash part of a tree's name.
func isTreeName(s string) bool {
	_, err := hex.DecodeString(s)
	return len(s) == treeNameLen && err == nil
}
