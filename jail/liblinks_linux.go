package jail

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// libraryLinksDir is where, under a state directory, linkLibraries keeps
// its trees.
const libraryLinksDir = "libs"

// linkLibraries returns a directory under stateDir that holds, at each
// library's own path, a hard link to it: a job's root then binds its
// top-level directories (/lib, /lib64) instead of every library, two
// mounts to make and tear down instead of nine for Deno. A tree is named
// by the paths and inodes of the files it links, so a library replaced on
// the host (an upgrade) names a new tree: the old one links the old file
// and is never bound again. Making a tree removes those whose links a
// replacement has left stale.
//
// Hard links cannot cross file systems: where stateDir is on another one
// than a library it fails (EXDEV), and the caller binds each library.
func linkLibraries(stateDir string, libs []string) (string, error) {
	if len(libs) == 0 {
		return "", errors.New("link libraries: none to link")
	}
	ids := make([]fileID, len(libs))
	h := sha256.New()
	for i, lib := range libs {
		if !filepath.IsAbs(lib) || filepath.Clean(lib) != lib {
			return "", fmt.Errorf("link libraries: %q is not a clean absolute path", lib)
		}
		var st unix.Stat_t
		if err := unix.Stat(lib, &st); err != nil {
			return "", fmt.Errorf("link libraries: %w", &os.PathError{Op: "stat", Path: lib, Err: err})
		}
		if st.Mode&unix.S_IFMT != unix.S_IFREG {
			return "", fmt.Errorf("link libraries: %s is not a regular file", lib)
		}
		ids[i] = idOf(&st)
		h.Write([]byte(lib))
		h.Write([]byte{0})
		h.Write(ids[i].bytes())
	}
	parent := filepath.Join(stateDir, libraryLinksDir)
	dir := filepath.Join(parent, hex.EncodeToString(h.Sum(nil))[:32])
	// The common case: made by an earlier run, and trusted as it stands.
	if err := checkPrivate(dir); err == nil {
		return dir, nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("link libraries: %w", err)
	}
	if err := os.MkdirAll(parent, 0o755); err != nil {
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
		link := filepath.Join(tmp, lib)
		if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
			return "", fmt.Errorf("link libraries: %w", err)
		}
		// The link is to the file itself, not to a symlink naming it.
		if err := unix.Linkat(unix.AT_FDCWD, lib, unix.AT_FDCWD, link, unix.AT_SYMLINK_FOLLOW); err != nil {
			return "", fmt.Errorf("link libraries: %w", &os.LinkError{Op: "link", Old: lib, New: link, Err: err})
		}
		// A library replaced between the stat and the link would be
		// linked under the old one's name.
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
	pruneStaleLinks(parent, dir)
	return dir, nil
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
// user owns and no one else may write: every job's libraries are bound
// from it.
func checkPrivate(dir string) error {
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return &os.PathError{Op: "lstat", Path: dir, Err: err}
	}
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFDIR:
		return fmt.Errorf("%s is not a directory", dir)
	case int(st.Uid) != os.Geteuid():
		return fmt.Errorf("%s is owned by uid %d, not %d", dir, st.Uid, os.Geteuid())
	case st.Mode&0o022 != 0:
		return fmt.Errorf("%s is writable by others (mode %#o)", dir, st.Mode&0o777)
	}
	return nil
}

// pruneStaleLinks removes the trees beside keep that link a file no longer
// at its path (replaced or removed): no run names them again, and their
// links keep the old files' blocks. Best effort.
func pruneStaleLinks(parent, keep string) {
	ents, err := os.ReadDir(parent)
	if err != nil {
		return
	}
	for _, e := range ents {
		tree := filepath.Join(parent, e.Name())
		if tree == keep || !e.IsDir() || strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		stale := false
		_ = filepath.WalkDir(tree, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			var link, host unix.Stat_t
			if unix.Lstat(path, &link) != nil || unix.Stat(strings.TrimPrefix(path, tree), &host) != nil || idOf(&link) != idOf(&host) {
				stale = true
				return filepath.SkipAll
			}
			return nil
		})
		if stale {
			_ = os.RemoveAll(tree)
		}
	}
}
