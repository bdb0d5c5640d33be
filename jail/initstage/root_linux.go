package initstage

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/runtimes/layout"
)

// newRootBase is where the init stage mounts the job's root before pivoting
// into it. The mount happens only inside the job's private mount namespace
// (checked first), as bubblewrap does.
const newRootBase = "/tmp"

// The root's steps (see steps): the job's root is built on a tmpfs at
// newRootBase, or taken from the one premounted ahead (Premount), filled,
// pivoted into and made read-only.

func (s *setup) checkMountNS() error { return checkPrivateMountNS(s.cfg.HostMountNS) }

// privateMounts makes every mount of the namespace private: nothing
// propagates to the host from here, nor from it. A premounted root was
// mounted as a slave of the host's mounts, which kept the namespace's view
// of the host current until now; from here it is the job's alone, and it
// is checked in that view: kept if it serves the configuration's mounts
// (report.Premounted, and the mounting steps skip), else taken down.
func (s *setup) privateMounts() error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return os.NewSyscallError("make mounts private", err)
	}
	p := s.premounted
	if p == nil {
		return nil
	}
	serves := p.serves(s.cfg.Mounts)
	unix.Close(p.under)
	if serves {
		s.sources, s.report.Premounted = p.sources, true
		return nil
	}
	return p.undo()
}

// openSources opens the binds' and copies' sources before the root's
// tmpfs can hide any of them (a source under /tmp, say); the binds are
// mounted through their fds.
func (s *setup) openSources() error {
	if s.report.Premounted {
		return nil
	}
	var err error
	s.sources, err = sourcesOf(s.cfg.Mounts)
	return err
}

func (s *setup) mountTmpfs() error {
	if s.report.Premounted {
		return nil
	}
	return mountRootTmpfs()
}

func (s *setup) mountAll() error {
	if s.report.Premounted {
		return nil
	}
	return mountEach(s.cfg.Mounts, s.sources)
}

// writeFiles writes the job's files into the root, after the join (the
// job's cgroup is charged for them) and after the mounts: a file under
// one would go through it, which filesOutsideMounts refuses.
func (s *setup) writeFiles() error {
	if err := filesOutsideMounts(s.cfg.Files, s.cfg.Mounts); err != nil {
		return err
	}
	for _, f := range s.cfg.Files {
		if err := writeRootFile(newRootBase, f.Path, f.Data, f.Mode); err != nil {
			return err
		}
	}
	return nil
}

// writeCopies fills the per-run copies (copyIntoRoot), the sources' last
// use: they are closed here.
func (s *setup) writeCopies() error {
	for i, m := range s.cfg.Mounts {
		if m.Type != "copy" {
			continue
		}
		if err := copyIntoRoot(newRootBase, m, s.sources[i], int(s.cfg.Process.User.UID)); err != nil {
			return fmt.Errorf("%s on %s: %w", m.Type, m.Destination, err)
		}
	}
	closeFDs(s.sources)
	s.sources = nil
	return nil
}

// pivot makes the new root the process's and enters the spec's working
// directory (Process.Cwd, absolute, inside the new root), which the
// runtime inherits: the guest's policies allow no chdir of its own.
func (s *setup) pivot() error {
	if err := pivotInto(newRootBase); err != nil {
		return err
	}
	if cwd := s.cfg.Process.Cwd; cwd != "" && cwd != "/" {
		if err := unix.Chdir(cwd); err != nil {
			return fmt.Errorf("the process's working directory %s: %w", cwd, os.NewSyscallError("chdir", err))
		}
	}
	return nil
}

func (s *setup) readOnly() error {
	if s.cfg.WritableRoot {
		return nil
	}
	if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return os.NewSyscallError("remount root read-only", err)
	}
	return nil
}

// checkPrivateMountNS refuses to go on in the host's mount namespace: a
// tmpfs over /tmp there would take the host down with it.
func checkPrivateMountNS(host uint64) error {
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/mnt", &st); err != nil {
		return os.NewSyscallError("stat /proc/self/ns/mnt", err)
	}
	if host == 0 || st.Ino == host {
		return errors.New("not in a private mount namespace: refusing to build the root")
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("not pid 1 of a new pid namespace (pid %d)", os.Getpid())
	}
	return nil
}

// mountRoot mounts the root's tmpfs at newRootBase and every mount of it
// but the per-run copies, whose sources it opens with the binds' and
// returns in mounts' order (-1 for other types): the steps from
// openSources to mountAll, for a root premounted. The caller has made
// the namespace's mounts private, or slaves, so that none of these
// reaches the host. mounted says the tmpfs went up. On an error the
// sources opened so far are returned too.
func mountRoot(mounts []specs.Mount) (sources []int, mounted bool, err error) {
	if sources, err = sourcesOf(mounts); err != nil {
		return sources, false, err
	}
	if err := mountRootTmpfs(); err != nil {
		return sources, false, err
	}
	return sources, true, mountEach(mounts, sources)
}

// sourcesOf opens the binds' and copies' sources, in mounts' order (-1 for
// other types); on an error, those opened so far are returned too.
func sourcesOf(mounts []specs.Mount) ([]int, error) {
	sources := make([]int, len(mounts))
	for i := range sources {
		sources[i] = -1
	}
	for i, m := range mounts {
		if m.Type != "bind" && m.Type != "copy" {
			continue
		}
		fd, err := unix.Open(m.Source, unix.O_PATH|unix.O_CLOEXEC, 0)
		if err != nil {
			hint := ""
			if errors.Is(err, unix.EACCES) {
				// The init stage holds no privilege over host files.
				hint = " (the jail's ids are unprivileged on the host: the path and its parents must be readable by others)"
			}
			return sources, fmt.Errorf("%s: %w%s", m.Source, os.NewSyscallError("open", err), hint)
		}
		sources[i] = fd
	}
	return sources, nil
}

func mountRootTmpfs() error {
	if err := unix.Mount("pmjail-root", newRootBase, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=32m,mode=0755"); err != nil {
		return os.NewSyscallError("mount root tmpfs", err)
	}
	return nil
}

// mountEach performs every mount but the copies below newRootBase, the
// binds through their opened sources.
func mountEach(mounts []specs.Mount, sources []int) error {
	for i, m := range mounts {
		if m.Type == "copy" {
			continue
		}
		if err := mountInRoot(newRootBase, m, sources[i]); err != nil {
			return fmt.Errorf("%s on %s: %w", m.Type, m.Destination, err)
		}
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// premountedRoot is a root mounted ahead of its configuration (Premount).
type premountedRoot struct {
	mounts  []specs.Mount
	sources []int
	// ids are the sources' files as opened (zero for no source).
	ids []fileID
	// under is newRootBase as it was before the root's tmpfs covered it:
	// sources beneath it are looked up from there.
	under int
}

type fileID struct{ dev, ino uint64 }

// premountRoot mounts p's root while the init stage waits for its
// configuration. A failure is undone and yields nil: the configuration's
// own build meets it again and reports it, with the job's stage names.
func premountRoot(p *Premount) *premountedRoot {
	if checkPrivateMountNS(p.HostMountNS) != nil {
		return nil
	}
	under, err := unix.Open(newRootBase, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	// The namespace's mounts become slaves: the root, premounted ahead, goes
	// on receiving the host's mounts and unmounts until its job comes.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		unix.Close(under)
		return nil
	}
	sources, mounted, err := mountRoot(p.Mounts)
	if err == nil {
		// The root itself receives nothing: a bind of a slave is a slave,
		// and a host mount beneath a bound directory would join the job's
		// root.
		err = unix.Mount("", newRootBase, "", unix.MS_REC|unix.MS_PRIVATE, "")
	}
	r := &premountedRoot{mounts: p.Mounts, sources: sources, ids: make([]fileID, len(sources)), under: under}
	for i, fd := range sources {
		if err != nil {
			break
		}
		var st unix.Stat_t
		if fd >= 0 {
			err = unix.Fstat(fd, &st)
			r.ids[i] = fileID{st.Dev, st.Ino}
		}
	}
	if err != nil {
		unix.Close(under)
		if !mounted {
			closeFDs(sources)
			return nil
		}
		if r.undo() != nil {
			// Half a root that cannot be taken down: no build can go on
			// over it, and the supervisor learns of it as a dead child.
			os.Exit(125)
		}
		return nil
	}
	return r
}

// serves reports whether the premounted root is the one mounts describe:
// the same mounts in the same order, each bind and copy source still the
// file opened for it (a runtime upgraded since names another). A source
// path that is not clean ("//", "..") is never taken for the same: it
// could lead into the premounted root itself, whose binds are the very
// files recorded.
func (r *premountedRoot) serves(mounts []specs.Mount) bool {
	if r == nil || len(mounts) != len(r.mounts) {
		return false
	}
	for i, m := range mounts {
		p := r.mounts[i]
		if m.Destination != p.Destination || m.Type != p.Type || m.Source != p.Source || !slices.Equal(m.Options, p.Options) {
			return false
		}
		if r.sources[i] < 0 {
			continue
		}
		if filepath.Clean(m.Source) != m.Source {
			return false
		}
		var st unix.Stat_t
		if r.stat(m.Source, &st) != nil || (fileID{st.Dev, st.Ino}) != r.ids[i] {
			return false
		}
	}
	return true
}

// stat stats path as the supervisor sees it: beneath newRootBase, which
// the root's tmpfs now covers, through the directory it covers.
func (r *premountedRoot) stat(path string, st *unix.Stat_t) error {
	if path == newRootBase {
		return unix.Fstat(r.under, st)
	}
	if rel, ok := strings.CutPrefix(path, newRootBase+"/"); ok {
		return unix.Fstatat(r.under, rel, st, 0)
	}
	return unix.Stat(path, st)
}

// undo takes the premounted root down (its tmpfs and everything under it)
// and closes its sources.
func (r *premountedRoot) undo() error {
	closeFDs(r.sources)
	r.sources = nil
	if err := unix.Unmount(newRootBase, unix.MNT_DETACH); err != nil {
		return os.NewSyscallError("detach the root premounted", err)
	}
	return nil
}

// filesOutsideMounts refuses a file whose path is a mount's destination or
// lies under one (the per-run copies excepted: they are written onto the
// job's /tmp on purpose).
func filesOutsideMounts(files []layout.File, mounts []specs.Mount) error {
	for _, f := range files {
		path := filepath.Clean("/" + f.Path)
		for _, m := range mounts {
			if m.Type == "copy" {
				continue
			}
			dst := filepath.Clean("/" + m.Destination)
			if path == dst || strings.HasPrefix(path, strings.TrimSuffix(dst, "/")+"/") {
				return fmt.Errorf("file %s lies under the %s mount on %s", f.Path, m.Type, m.Destination)
			}
		}
	}
	return nil
}

func writeRootFile(root, path string, data []byte, mode os.FileMode) error {
	// A job's files come from its client (package job checks them); a
	// path that is not absolute and clean could name a place outside the
	// root, which filepath.Join would resolve before the pivot.
	if !filepath.IsAbs(path) || filepath.Clean(path) != path || path == "/" {
		return fmt.Errorf("write %q: not a clean absolute path in the root", path)
	}
	dst := filepath.Join(root, path)
	if mode.IsDir() {
		// An empty directory the runtime expects (a warm runtime's job
		// directory, whose files come with the start frame).
		if err := mkdirAll(dst); err != nil {
			return fmt.Errorf("create %s: %w", path, err)
		}
		return nil
	}
	if err := mkdirAll(filepath.Dir(dst)); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	if mode == 0 {
		mode = 0o444
	}
	if err := writeFile(dst, data, uint32(mode.Perm())); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// mountInRoot performs one OCI mount below root; a bind mount's source is
// the already opened src.
func mountInRoot(root string, m specs.Mount, src int) error {
	dst := filepath.Join(root, m.Destination)
	flags, data := mountOptions(m.Options)
	switch m.Type {
	case "bind":
		var st unix.Stat_t
		if err := unix.Fstat(src, &st); err != nil {
			return os.NewSyscallError("fstat", err)
		}
		if err := makeMountPoint(dst, st.Mode&unix.S_IFMT == unix.S_IFDIR); err != nil {
			return err
		}
		if err := unix.Mount(fmt.Sprintf("/proc/self/fd/%d", src), dst, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return os.NewSyscallError("bind", err)
		}
		// A remount must keep the flags the source mount has locked.
		var sfs unix.Statfs_t
		if err := unix.Statfs(dst, &sfs); err != nil {
			return os.NewSyscallError("statfs", err)
		}
		flags |= lockedFlags(sfs.Flags)
		if err := unix.Mount("", dst, "", unix.MS_REMOUNT|unix.MS_BIND|flags, ""); err != nil {
			return os.NewSyscallError("remount bind", err)
		}
	default:
		if err := makeMountPoint(dst, true); err != nil {
			return err
		}
		if err := unix.Mount(m.Source, dst, m.Type, flags, data); err != nil {
			return os.NewSyscallError("mount", err)
		}
	}
	return nil
}

// copyIntoRoot gives the guest a writable copy of a read-only host
// directory (m.Source, opened as src) at m.Destination on the job's /tmp,
// which must be mounted already: writes stay in the run and the host copy
// never changes. It copies rather than mounting overlayfs: a copy-up of a
// file whose owner is not mapped in the job's user namespace fails with
// EOVERFLOW, and the shared copy is root's. Only directories and regular
// files are copied, and the directory must be small (a code cache).
func copyIntoRoot(root string, m specs.Mount, src, uid int) error {
	dst := filepath.Join(root, m.Destination)
	if err := mkdirAll(dst); err != nil {
		return err
	}
	fd, err := unix.Open(dst, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return &os.PathError{Op: "open", Path: dst, Err: err}
	}
	defer unix.Close(fd)
	return copyTree(src, fd, uid)
}

func makeMountPoint(dst string, dir bool) error {
	if dir {
		return mkdirAll(dst)
	}
	if err := mkdirAll(filepath.Dir(dst)); err != nil {
		return err
	}
	// An empty file to bind over (mknod makes a regular file without
	// opening it); one already there will do.
	if err := unix.Mknod(dst, unix.S_IFREG|0o444, 0); err != nil && !errors.Is(err, unix.EEXIST) {
		return &os.PathError{Op: "create", Path: dst, Err: err}
	}
	return nil
}

var mountFlagNames = map[string]uintptr{
	"ro":         unix.MS_RDONLY,
	"nosuid":     unix.MS_NOSUID,
	"nodev":      unix.MS_NODEV,
	"noexec":     unix.MS_NOEXEC,
	"noatime":    unix.MS_NOATIME,
	"nodiratime": unix.MS_NODIRATIME,
	"relatime":   unix.MS_RELATIME,
	"rbind":      unix.MS_BIND | unix.MS_REC,
	"bind":       unix.MS_BIND,
	"rw":         0,
}

// mountOptions splits OCI mount options into flags and fs-specific data.
func mountOptions(opts []string) (uintptr, string) {
	var flags uintptr
	var data []string
	for _, o := range opts {
		if f, ok := mountFlagNames[o]; ok {
			flags |= f
			continue
		}
		data = append(data, o)
	}
	return flags &^ (unix.MS_BIND | unix.MS_REC), strings.Join(data, ",")
}

func lockedFlags(st int64) uintptr {
	var f uintptr
	for _, p := range []struct {
		st int64
		ms uintptr
	}{
		{unix.ST_NOSUID, unix.MS_NOSUID},
		{unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
		{unix.ST_RDONLY, unix.MS_RDONLY},
	} {
		if st&p.st != 0 {
			f |= p.ms
		}
	}
	return f
}

// pivotInto makes root the process's root and detaches the old one.
func pivotInto(root string) error {
	if err := unix.Chdir(root); err != nil {
		return os.NewSyscallError("chdir", err)
	}
	// pivot_root(".", ".") stacks the old root on top of the new one, so it
	// can be detached without a put_old directory.
	if err := unix.PivotRoot(".", "."); err != nil {
		return os.NewSyscallError("pivot_root", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return os.NewSyscallError("detach old root", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return os.NewSyscallError("chdir /", err)
	}
	return nil
}
