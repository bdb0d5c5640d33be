package initstage

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/kfile"
	"github.com/pmjail/pmjail/runtimes/layout"
	"github.com/pmjail/pmjail/seccomp/bpf"
)

// newRootBase is where the init stage mounts the job's root before pivoting
// into it. The mount happens only inside the job's private mount namespace
// (checked first), as bubblewrap does.
const newRootBase = "/tmp"

// stageError records which step of the set-up failed.
type stageError struct {
	stage string
	err   error
}

func (e *stageError) Error() string { return e.stage + ": " + e.err.Error() }
func (e *stageError) Unwrap() error { return e.err }

// StageBindSource is the stage of a run whose bind source the init stage,
// unprivileged on the host, could not open: missing, or not readable by
// others. For pmjail exec's --ro-bind paths that is the job's mistake.
const StageBindSource = "bind source"

func stage(name string, err error) error {
	if err == nil {
		return nil
	}
	return &stageError{stage: name, err: err}
}

// Main is the init stage: it runs in the job's new namespaces, builds the
// root, drops everything, starts the runtime and stays as its parent (see
// runRuntime). It never returns.
func Main() {
	// Every per-thread attribute (capabilities, no_new_privs, the seccomp
	// filter) must be set on the thread that calls execve. So must the
	// job's cgroups, joined during the set-up (see Join).
	runtime.LockOSThread()
	control := os.NewFile(ControlFD, "control")
	var prepared *preparedRoot
	cfg, err := readConfig(newRightsReader(ControlFD, 0), func(p *Prepare) { prepared = prepareRoot(p) })
	if err != nil {
		// The supervisor is gone or broken; nothing to report to.
		os.Exit(125)
	}
	report, err := setUp(&cfg, prepared, awaitJoin)
	if err != nil {
		report.Error = err.Error()
		var se *stageError
		if errors.As(err, &se) {
			report.Stage = se.stage
		}
		report.ExitCode = 125
		// A failed set-up hands over nothing.
		report.FDs, report.fds = nil, nil
		_ = sendReport(control, report)
		os.Exit(125)
	}
	// The filter is the last layer: after it only the report and execve.
	if len(cfg.Seccomp) > 0 {
		var prog bpf.Program
		if err := prog.UnmarshalBinary(cfg.Seccomp); err != nil {
			failInit(control, "seccomp", err)
		}
		listener, err := bpf.Install(&prog)
		if err != nil {
			failInit(control, "seccomp", err)
		}
		if listener >= 0 {
			report.FDs = append(report.FDs, FDSeccomp)
			report.fds = append(report.fds, listener)
		}
	}
	// The id switch cleared the parent-death signal until dropPrivileges set
	// it again. A supervisor that died in between has closed its end, so
	// this send fails and no guest starts without one.
	if err := sendReport(control, report); err != nil {
		os.Exit(125)
	}
	os.Exit(runRuntime(control, cfg.Process, cfg.Channel))
}

// runRuntime starts the runtime as this process's child and stays, as pid
// 1 of the job's pid namespace, until the runtime ends; it returns the
// runtime's exit code, having reported how it ended. Staying is what ties
// the job's life to the supervisor's: this process holds the parent-death
// signal (set by dropPrivileges), which the guest cannot clear as it could
// its own, and its death, whatever causes it, makes the kernel kill every
// process of the namespace. It runs nothing of the guest's: the guest's
// ids, capabilities and seccomp filter are already its own (the runtime
// inherits them from this thread, and TSYNC gave the filter to every
// thread), so the policies allow what it does from here: the start (pipe2,
// a vfork-style clone, execve in the child), sendmsg, wait4 and exit.
func runRuntime(control *os.File, p *specs.Process, channel bool) int {
	files := []uintptr{0, 1, 2}
	if channel {
		files = append(files, ChannelFD)
	}
	// The guest runs as this process's ids and may signal it: pid 1 of a
	// namespace is spared only the signals it leaves at their default, and
	// Go installs handlers, so the signals Go would die of, sent by kill
	// (or as a CLONE_PARENT child's exit signal), are taken here and
	// dropped; Go ignores the others already. Not every signal: taking
	// them all costs a run milliseconds. A channel nobody reads drops them.
	signal.Notify(make(chan os.Signal, 1), fatalSignals...)
	pidfd := -1
	pid, err := syscall.ForkExec(p.Args[0], p.Args, &syscall.ProcAttr{
		Env: p.Env, Files: files, Sys: &syscall.SysProcAttr{PidFD: &pidfd},
	})
	if err != nil {
		code := 126
		if errors.Is(err, unix.ENOENT) {
			code = 127
		}
		_ = sendReport(control, Report{Error: fmt.Sprintf("exec %s: %v", p.Args[0], err), Stage: "exec", ExitCode: code})
		return code
	}
	// The guest's output pipes and channel are the guest's alone: the
	// supervisor reads their EOF when every guest process has gone.
	for _, fd := range files {
		unix.Close(int(fd))
	}
	// The pidfd lets the supervisor read the runtime's own state back.
	if err := sendReport(control, Report{Started: true, FDs: []string{FDRuntime}, fds: []int{pidfd}}); err != nil {
		// The supervisor is gone, and so, by the parent-death signal, is
		// this job.
		return 125
	}
	for {
		var ws unix.WaitStatus
		// Orphans of the guest are this process's to reap too.
		reaped, err := unix.Wait4(-1, &ws, 0, nil)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 125
		}
		if reaped != pid {
			continue
		}
		exit := Report{Exited: true, ExitCode: ws.ExitStatus()}
		if ws.Signaled() {
			// pid 1 of a pid namespace cannot die of a signal it sends
			// itself: the signal goes in the report.
			exit.Signal = int(ws.Signal())
			exit.ExitCode = 128 + exit.Signal
		}
		_ = sendReport(control, exit)
		return exit.ExitCode
	}
}

// fatalSignals are those a Go program dies of when kill sends them and it
// has not asked for them (the runtime's sigtable: _SigKill, _SigThrow, and
// _SigPanic, which from kill is no fault to recover from).
var fatalSignals = []os.Signal{
	unix.SIGHUP, unix.SIGINT, unix.SIGTERM,
	unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT, unix.SIGSTKFLT, unix.SIGSYS,
	unix.SIGBUS, unix.SIGFPE, unix.SIGSEGV,
}

func failInit(control *os.File, name string, err error) {
	_ = sendReport(control, Report{Error: name + ": " + err.Error(), Stage: name, ExitCode: 125})
	os.Exit(125)
}

// sendReport sends the report and the descriptors it names to the
// supervisor, then closes this side's copies.
func sendReport(control *os.File, report Report) error {
	data, err := report.MarshalBinary()
	if err != nil {
		return err
	}
	if err := SendMessage(int(control.Fd()), data, report.fds); err != nil {
		return err
	}
	for _, fd := range report.fds {
		_ = unix.Close(fd)
	}
	return nil
}

// awaitJoin reads the supervisor's Join and joins the job's cgroups
// through the task files that came with it.
func awaitJoin() error {
	var join Join
	fds, err := receive(ControlFD, &join, maxJoinSize, maxJoin)
	if err != nil {
		return fmt.Errorf("read the supervisor's join: %w", err)
	}
	joined, err := joinCgroups(fds)
	if err == nil && joined != join.TaskFiles {
		err = fmt.Errorf("joined %d cgroup hierarchies, want %d", joined, join.TaskFiles)
	}
	return err
}

// setUp performs every step before the seccomp filter, in nsjail's order,
// on the root prepared ahead if it is the configuration's (nil: none);
// join places it in the job's cgroup (see Join).
func setUp(cfg *Config, prepared *preparedRoot, join func() error) (Report, error) {
	var report Report
	proc := cfg.Process
	if proc == nil || len(proc.Args) == 0 {
		return report, stage("config", errors.New("no process to run"))
	}
	if err := checkPrivateMountNS(cfg.HostMountNS); err != nil {
		return report, stage("mount namespace", err)
	}
	lastCap, err := lastCapability()
	if err != nil {
		return report, stage("capabilities", err)
	}
	if err := buildRoot(cfg, prepared, join, &report); err != nil {
		return report, err
	}
	if cfg.HasNamespace(specs.UTSNamespace) {
		if err := stage("hostname", unix.Sethostname([]byte(cfg.Hostname))); err != nil {
			return report, err
		}
	}
	// The supervisor has placed this process in the job's cgroup by now, so
	// the new cgroup namespace is rooted at the job's own cgroup.
	if cfg.HasNamespace(specs.CgroupNamespace) {
		if err := stage("cgroup namespace", os.NewSyscallError("unshare", unix.Unshare(unix.CLONE_NEWCGROUP))); err != nil {
			return report, err
		}
	}
	if err := stage("rlimits", setRlimits(proc.Rlimits)); err != nil {
		return report, err
	}
	if err := stage("fds", closeExtraFDs(cfg.Channel)); err != nil {
		return report, err
	}
	if cfg.Landlock {
		var rw []string
		if cfg.Channel {
			rw = append(rw, layout.ChannelOut)
		}
		report.Landlock, report.LandlockReason = applyLandlock(cfg.Mounts, rw)
	}
	if err := stage("privileges", dropPrivileges(proc.User, lastCap)); err != nil {
		return report, err
	}
	dropOtherThreads()
	return report, nil
}

// dropOtherThreads empties the capabilities of the process's other
// threads too: the init stage outlives the set-up as the runtime's parent
// (runRuntime), and its Go runtime's threads, which never run guest code,
// need none. They keep the namespace's root ids, unprivileged on the host
// and no task of the guest's uid (RLIMIT_NPROC counts by uid). Best effort,
// before the seccomp filter (which refuses capset): AllThreadsSyscall
// needs a program built without cgo, as pmjail-init is; a cgo binary
// serving as its own init stage leaves them as they are. On the locked
// thread, whose sets are empty already, the call changes nothing.
func dropOtherThreads() {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var none [2]unix.CapUserData
	_, _, _ = syscall.AllThreadsSyscall(unix.SYS_CAPSET, uintptr(unsafe.Pointer(&hdr)), uintptr(unsafe.Pointer(&none[0])), 0)
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

func lastCapability() (int, error) {
	data, err := kfile.Read("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap: %w", err)
	}
	return n, nil
}

// buildRoot assembles the job's root on a fresh tmpfs (or takes the one
// prepared ahead, when it is this one), pivots into it and makes it
// read-only. The file systems are mounted before the join, the job's files
// and copies written after it.
func buildRoot(cfg *Config, prepared *preparedRoot, join func() error, report *Report) error {
	// Every mount of the namespace private: nothing propagates to the
	// host from here, nor from it. A prepared root was mounted as a slave
	// of the host's mounts, which kept the namespace's view of the host
	// current until now; from here it is the job's alone, and it is
	// checked in that view.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return stage("root", os.NewSyscallError("make mounts private", err))
	}
	var sources []int
	serves := false
	if prepared != nil {
		serves = prepared.serves(cfg.Mounts)
		unix.Close(prepared.under)
	}
	if serves {
		sources, report.Prepared = prepared.sources, true
	} else {
		if prepared != nil {
			if err := prepared.undo(); err != nil {
				return stage("root", err)
			}
		}
		var err error
		if sources, _, err = mountRoot(cfg.Mounts); err != nil {
			closeFDs(sources)
			return err
		}
	}
	defer closeFDs(sources)
	root := newRootBase
	if err := stage("cgroup", join()); err != nil {
		return err
	}
	// Written after the mounts, a file under one would go through it.
	if err := stage("files", filesOutsideMounts(cfg.Files, cfg.Mounts)); err != nil {
		return err
	}
	for _, f := range cfg.Files {
		if err := writeRootFile(root, f.Path, f.Data, f.Mode); err != nil {
			return stage("files", err)
		}
	}
	for i, m := range cfg.Mounts {
		if m.Type != "copy" {
			continue
		}
		if err := copyIntoRoot(root, m, sources[i], int(cfg.Process.User.UID)); err != nil {
			return stage("mounts", fmt.Errorf("%s on %s: %w", m.Type, m.Destination, err))
		}
	}
	if cfg.Channel {
		fds, err := makeChannel(root, int(cfg.Process.User.UID))
		if err != nil {
			return stage("channel", err)
		}
		report.FDs = append(report.FDs, FDChannelIn, FDChannelOut)
		report.fds = append(report.fds, fds...)
	}
	if err := pivotInto(root); err != nil {
		return stage("pivot_root", err)
	}
	if !cfg.WritableRoot {
		if err := unix.Mount("", "/", "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
			return stage("root", os.NewSyscallError("remount root read-only", err))
		}
	}
	return nil
}

// mountRoot mounts the root's tmpfs at newRootBase and every mount of it
// but the per-run copies, whose sources it opens with the binds' and
// returns in mounts' order (-1 for other types). The caller has made the
// namespace's mounts private, or slaves, so that none of these reaches the
// host. mounted says the tmpfs went up. On an error the sources opened so
// far are returned too.
func mountRoot(mounts []specs.Mount) (sources []int, mounted bool, err error) {
	// Bind sources are opened before the root's tmpfs can hide any of them
	// (a source under /tmp, say), then bound through their fds.
	sources = make([]int, len(mounts))
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
			return sources, false, stage(StageBindSource, fmt.Errorf("%s: %w%s", m.Source, os.NewSyscallError("open", err), hint))
		}
		sources[i] = fd
	}
	root := newRootBase
	if err := unix.Mount("pmjail-root", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=32m,mode=0755"); err != nil {
		return sources, false, stage("root", os.NewSyscallError("mount root tmpfs", err))
	}
	for i, m := range mounts {
		if m.Type == "copy" {
			continue
		}
		if err := mountInRoot(root, m, sources[i]); err != nil {
			return sources, true, stage("mounts", fmt.Errorf("%s on %s: %w", m.Type, m.Destination, err))
		}
	}
	return sources, true, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
}

// preparedRoot is a root mounted ahead of its configuration (Prepare).
type preparedRoot struct {
	mounts  []specs.Mount
	sources []int
	// ids are the sources' files as opened (zero for no source).
	ids []fileID
	// under is newRootBase as it was before the root's tmpfs covered it:
	// sources beneath it are looked up from there.
	under int
}

type fileID struct{ dev, ino uint64 }

// prepareRoot mounts p's root while the init stage waits for its
// configuration. A failure is undone and yields nil: the configuration's
// own build meets it again and reports it, with the job's stage names.
func prepareRoot(p *Prepare) *preparedRoot {
	if checkPrivateMountNS(p.HostMountNS) != nil {
		return nil
	}
	under, err := unix.Open(newRootBase, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil
	}
	// The namespace's mounts become slaves: the root, prepared ahead, goes
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
	r := &preparedRoot{mounts: p.Mounts, sources: sources, ids: make([]fileID, len(sources)), under: under}
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

// serves reports whether the prepared root is the one mounts describe:
// the same mounts in the same order, each bind and copy source still the
// file opened for it (a runtime upgraded since names another). A source
// path that is not clean ("//", "..") is never taken for the same: it
// could lead into the prepared root itself, whose binds are the very
// files recorded.
func (r *preparedRoot) serves(mounts []specs.Mount) bool {
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
func (r *preparedRoot) stat(path string, st *unix.Stat_t) error {
	if path == newRootBase {
		return unix.Fstat(r.under, st)
	}
	if rel, ok := strings.CutPrefix(path, newRootBase+"/"); ok {
		return unix.Fstatat(r.under, rel, st, 0)
	}
	return unix.Stat(path, st)
}

// undo takes the prepared root down (its tmpfs and everything under it)
// and closes its sources.
func (r *preparedRoot) undo() error {
	closeFDs(r.sources)
	r.sources = nil
	if err := unix.Unmount(newRootBase, unix.MNT_DETACH); err != nil {
		return os.NewSyscallError("detach the root prepared ahead", err)
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
	dst := filepath.Join(root, path)
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

func setRlimits(limits []specs.POSIXRlimit) error {
	for _, l := range limits {
		res, ok := rlimitNames[l.Type]
		if !ok {
			return fmt.Errorf("unknown rlimit %s", l.Type)
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: l.Soft, Max: l.Hard}); err != nil {
			return os.NewSyscallError("setrlimit "+l.Type, err)
		}
	}
	return nil
}

var rlimitNames = map[string]int{
	"RLIMIT_CORE":   unix.RLIMIT_CORE,
	"RLIMIT_NOFILE": unix.RLIMIT_NOFILE,
	"RLIMIT_FSIZE":  unix.RLIMIT_FSIZE,
	"RLIMIT_CPU":    unix.RLIMIT_CPU,
	"RLIMIT_NPROC":  unix.RLIMIT_NPROC,
	"RLIMIT_STACK":  unix.RLIMIT_STACK,
	"RLIMIT_AS":     unix.RLIMIT_AS,
}

// closeExtraFDs marks every fd above the channel close-on-exec (and the
// channel's placeholder too when there is no channel): the guest inherits
// stdin, stdout, stderr and the channel, nothing else.
func closeExtraFDs(channel bool) error {
	first := uint(ControlFD)
	if !channel {
		first = ChannelFD
	}
	if err := unix.CloseRange(first, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return os.NewSyscallError("close_range", err)
	}
	return nil
}

// Securebits (linux/securebits.h): no capabilities for uid 0 and no
// ambient raise, each locked, and KEEP_CAPS / NO_SETUID_FIXUP locked off.
const lockedSecurebits = 1<<0 | 1<<1 | 1<<3 | 1<<5 | 1<<6 | 1<<7

// dropPrivileges empties the bounding, ambient and inheritable capability
// sets, switches to the guest's ids, sets no_new_privs, re-arms the parent
// death signal (a credential change clears it) and then checks that nothing
// can be regained.
//
// Every step acts on the calling thread's credentials only, the id changes
// included: setresuid(2) and friends are per-thread system calls, which Go's
// syscall package (and so unix.Setresuid) turns into a signal round trip
// through every runtime thread to keep a Go program's ids uniform. Here one
// thread is enough, and the right one: Main runs the set-up on its locked
// thread and starts the runtime from it (runRuntime), which begins with
// this thread's credentials alone. The process's other threads keep the
// namespace's root ids but never run guest code, nor anything but the Go
// runtime's own work. The checks at the end are on this thread too.
func dropPrivileges(user specs.User, lastCap int) error {
	for c := 0; c <= lastCap; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return os.NewSyscallError(fmt.Sprintf("drop bounding capability %d", c), err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return os.NewSyscallError("clear ambient capabilities", err)
	}
	// Without SECBIT_KEEP_CAPS the switch away from uid 0 clears the
	// permitted and effective sets; the locked NOROOT bits keep an exec from
	// granting any back.
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, lockedSecurebits, 0, 0, 0); err != nil {
		return os.NewSyscallError("set securebits", err)
	}
	if err := threadSyscall(sysSetgroups, 0, 0, 0); err != nil {
		return os.NewSyscallError("setgroups", err)
	}
	uid, gid := uintptr(user.UID), uintptr(user.GID)
	if err := threadSyscall(sysSetresgid, gid, gid, gid); err != nil {
		return os.NewSyscallError("setresgid", err)
	}
	if err := threadSyscall(sysSetresuid, uid, uid, uid); err != nil {
		return os.NewSyscallError("setresuid", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capset", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return os.NewSyscallError("set no_new_privs", err)
	}
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0); err != nil {
		return os.NewSyscallError("set parent death signal", err)
	}
	// Trust, but verify: none of this may be undone.
	if threadSyscall(sysSetresuid, 0, 0, 0) == nil {
		return errors.New("regained uid 0 after dropping it")
	}
	if gid != 0 && threadSyscall(sysSetresgid, 0, 0, 0) == nil {
		return errors.New("regained gid 0 after dropping it")
	}
	ruid, euid, suid := unix.Getresuid()
	rgid, egid, sgid := unix.Getresgid()
	if ruid != int(uid) || euid != int(uid) || suid != int(uid) || rgid != int(gid) || egid != int(gid) || sgid != int(gid) {
		return fmt.Errorf("ids %d/%d/%d:%d/%d/%d after the switch, want %d:%d", ruid, euid, suid, rgid, egid, sgid, uid, gid)
	}
	if n, err := unix.Getgroups(); err != nil || len(n) != 0 {
		return fmt.Errorf("supplementary groups %v (%v) after dropping them", n, err)
	}
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return os.NewSyscallError("capget", err)
	}
	if data[0].Effective|data[0].Permitted|data[0].Inheritable|data[1].Effective|data[1].Permitted|data[1].Inheritable != 0 {
		return errors.New("capabilities left after dropping them")
	}
	return nil
}

// makeChannel creates the guest channel's FIFOs in the new root and opens
// their ends: the host's two (returned, to be sent to the supervisor) and a
// writer the guest inherits as fd 3, so that the host reads EOF exactly when
// every guest process is gone, whether or not the guest ever opened the
// path itself.
func makeChannel(root string, guestUID int) ([]int, error) {
	dir := filepath.Join(root, layout.ChannelDir)
	if err := mkdirAll(dir); err != nil {
		return nil, err
	}
	in, out := filepath.Join(root, layout.ChannelIn), filepath.Join(root, layout.ChannelOut)
	for _, p := range []string{in, out} {
		if err := unix.Mkfifo(p, 0o600); err != nil {
			return nil, os.NewSyscallError("mkfifo "+p, err)
		}
		if err := unix.Chown(p, guestUID, guestUID); err != nil {
			return nil, os.NewSyscallError("chown "+p, err)
		}
	}
	// O_RDWR opens a FIFO without waiting for a peer.
	hostIn, err := unix.Open(in, unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("open channel in", err)
	}
	hostOut, err := unix.Open(out, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("open channel out", err)
	}
	guestOut, err := unix.Open(out, unix.O_WRONLY|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, os.NewSyscallError("open channel out for the guest", err)
	}
	// dup3 replaces the placeholder the supervisor left at fd 3.
	if err := unix.Dup3(guestOut, ChannelFD, 0); err != nil {
		return nil, os.NewSyscallError("dup3", err)
	}
	unix.Close(guestOut)
	return []int{hostIn, hostOut}, nil
}

// threadSyscall makes a credential system call on the calling thread alone
// (see dropPrivileges).
func threadSyscall(nr, a1, a2, a3 uintptr) error {
	if _, _, errno := unix.RawSyscall(nr, a1, a2, a3); errno != 0 {
		return errno
	}
	return nil
}
