//go:build linux && amd64 && cgo

package spawn

/*
#cgo CFLAGS: -O2 -fno-stack-protector

#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <linux/sched.h>

// The child shares the supervisor's memory (CLONE_VM) and runs while the
// supervisor's threads run on: it may touch only its own stack and this
// request, and may call nothing that takes a lock or sets errno (the
// supervisor thread's TLS). So it makes raw system calls only
// (TestSpawnChildMakesNoCalls reads its machine code to check).

struct pmjail_spawn {
	const char *path;
	char *const *argv;
	char *const *envp;
	int fds[8];
	int nfds;
	int sync_fd;   // the child reads one byte here before it goes on
	int sync_peer; // the write end of that pipe: the child's copy is closed
	int err_fd;    // the child writes {step, errno} here if it fails
	int setsid;
	int creds;     // set uid/gid
	int setgroups; // and drop the supplementary groups
	uint32_t uid, gid;
	int pdeathsig;
	long ppid;     // the parent's pid as the child sees it
	uint64_t flags;
	int cgroup_fd;
	void *stack;
	size_t stack_size;
};

static inline long pj_sys6(long n, long a, long b, long c, long d, long e, long f) {
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	long ret;
	__asm__ volatile("syscall"
		: "=a"(ret)
		: "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
		: "rcx", "r11", "memory");
	return ret;
}
#define pj_sys(n, a, b, c) pj_sys6((n), (long)(a), (long)(b), (long)(c), 0, 0, 0)

// pmjail_clone3(args, size, fn, arg): clone3 that runs fn(arg) on the new
// stack in the child and exits with its result; the parent gets the pid
// or -errno. (glibc has no public clone3, and a child on a new stack
// cannot return through a C function.)
long pmjail_clone3(struct clone_args *args, size_t size, int (*fn)(void *), void *arg);
__asm__(
	".pushsection .text\n"
	".globl pmjail_clone3\n"
	".type pmjail_clone3,@function\n"
	"pmjail_clone3:\n"
	"	movq %rdx, %r8\n"      // fn and arg survive the syscall in r8, r9
	"	movq %rcx, %r9\n"
	"	movl $435, %eax\n"     // SYS_clone3
	"	syscall\n"
	"	testq %rax, %rax\n"
	"	jnz 1f\n"
	"	xorl %ebp, %ebp\n"     // child: the new stack's outermost frame
	"	movq %r9, %rdi\n"
	"	call *%r8\n"
	"	movl %eax, %edi\n"
	"	movl $231, %eax\n"     // SYS_exit_group
	"	syscall\n"
	"	hlt\n"
	"1:	ret\n"
	".size pmjail_clone3, .-pmjail_clone3\n"
	".popsection\n");

struct pj_sigaction {
	void *handler;
	unsigned long flags;
	void *restorer;
	uint64_t mask;
};

enum { STEP_SIGNALS = 1, STEP_SYNC, STEP_SETSID, STEP_GROUPS, STEP_GID, STEP_UID, STEP_FDS, STEP_CHDIR, STEP_PDEATHSIG, STEP_EXEC };

static int pj_fail(int err_fd, int step, long err) {
	int msg[2] = {step, (int)-err};
	pj_sys(SYS_write, err_fd, msg, sizeof msg);
	return 127;
}

static int pj_child(void *arg) {
	struct pmjail_spawn *s = arg;
	long r;
	// Should the supervisor die before the ids change (which clears it),
	// this child must not linger in its pipe read.
	if (s->pdeathsig)
		pj_sys6(SYS_prctl, PR_SET_PDEATHSIG, s->pdeathsig, 0, 0, 0, 0);
	// The status pipe must not be among the slots the fds are placed in:
	// a dup onto it would close it, and the parent would take that EOF
	// for a successful exec while this child still uses the shared stack.
	int err_fd = s->err_fd;
	if (err_fd < s->nfds) {
		r = pj_sys(SYS_fcntl, err_fd, F_DUPFD_CLOEXEC, s->nfds);
		if (r < 0)
			return pj_fail(err_fd, STEP_FDS, r); // still open here
		err_fd = (int)r;
	}
	// Signals stay blocked (the parent blocked them all around the clone)
	// until no handler of the supervisor's is left to run here.
	for (int sig = 1; sig <= 64; sig++) {
		struct pj_sigaction old, dfl = {0};
		if (sig == SIGKILL || sig == SIGSTOP)
			continue;
		if (pj_sys6(SYS_rt_sigaction, sig, 0, (long)&old, 8, 0, 0) < 0)
			continue;
		if (old.handler == SIG_IGN || old.handler == SIG_DFL)
			continue;
		if ((r = pj_sys6(SYS_rt_sigaction, sig, (long)&dfl, 0, 8, 0, 0)) < 0)
			return pj_fail(err_fd, STEP_SIGNALS, r);
	}
	char b;
	pj_sys(SYS_close, s->sync_peer, 0, 0);
	if ((r = pj_sys(SYS_read, s->sync_fd, &b, 1)) != 1)
		return pj_fail(err_fd, STEP_SYNC, r < 0 ? r : -EPIPE);
	if (s->setsid && (r = pj_sys(SYS_setsid, 0, 0, 0)) < 0)
		return pj_fail(err_fd, STEP_SETSID, r);
	if (s->creds) {
		if (s->setgroups && (r = pj_sys(SYS_setgroups, 0, 0, 0)) < 0)
			return pj_fail(err_fd, STEP_GROUPS, r);
		if ((r = pj_sys(SYS_setresgid, s->gid, s->gid, s->gid)) < 0)
			return pj_fail(err_fd, STEP_GID, r);
		if ((r = pj_sys(SYS_setresuid, s->uid, s->uid, s->uid)) < 0)
			return pj_fail(err_fd, STEP_UID, r);
	}
	// Move every source below nfds out of the way first, so that no dup2
	// overwrites a source still to be placed.
	int src[8];
	for (int i = 0; i < s->nfds; i++) {
		src[i] = s->fds[i];
		if (src[i] < s->nfds && src[i] != i) {
			if ((r = pj_sys(SYS_fcntl, src[i], F_DUPFD_CLOEXEC, s->nfds)) < 0)
				return pj_fail(err_fd, STEP_FDS, r);
			src[i] = (int)r;
		}
	}
	for (int i = 0; i < s->nfds; i++) {
		if (src[i] == i)
			r = pj_sys(SYS_fcntl, i, F_SETFD, 0);
		else
			r = pj_sys(SYS_dup3, src[i], i, 0);
		if (r < 0)
			return pj_fail(err_fd, STEP_FDS, r);
	}
	if ((r = pj_sys(SYS_chdir, "/", 0, 0)) < 0)
		return pj_fail(err_fd, STEP_CHDIR, r);
	if (s->pdeathsig) {
		// Set after the credentials, whose change would clear it; if the
		// parent is already gone, nothing would ever send it.
		if ((r = pj_sys6(SYS_prctl, PR_SET_PDEATHSIG, s->pdeathsig, 0, 0, 0, 0)) < 0)
			return pj_fail(err_fd, STEP_PDEATHSIG, r);
		if (pj_sys(SYS_getppid, 0, 0, 0) != s->ppid)
			return pj_fail(err_fd, STEP_PDEATHSIG, -ESRCH);
	}
	uint64_t none = 0;
	pj_sys6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&none, 0, 8, 0, 0);
	r = pj_sys(SYS_execve, s->path, s->argv, s->envp);
	// A signal that came in between the unmask and here has killed us or
	// been ignored: the supervisor's handlers are gone.
	return pj_fail(err_fd, STEP_EXEC, r);
}

// pmjail_spawn_clone starts the child with every signal blocked on this
// thread, so that none is handled in the child before it has reset the
// handlers. The mask is set by a raw call: glibc's would leave its own two
// (SIGCANCEL, SIGSETXID) open. It returns the pid or -errno.
static long pmjail_spawn_clone(struct pmjail_spawn *s) {
	uint64_t all = ~(uint64_t)0, old;
	pj_sys6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&all, (long)&old, 8, 0, 0);
	struct clone_args ca;
	__builtin_memset(&ca, 0, sizeof ca);
	ca.flags = s->flags | CLONE_VM;
	ca.exit_signal = SIGCHLD;
	ca.stack = (uint64_t)(uintptr_t)s->stack;
	ca.stack_size = s->stack_size;
	if (s->cgroup_fd >= 0) {
		ca.flags |= CLONE_INTO_CGROUP;
		ca.cgroup = (uint64_t)s->cgroup_fd;
	}
	long pid = pmjail_clone3(&ca, sizeof ca, pj_child, s);
	pj_sys6(SYS_rt_sigprocmask, SIG_SETMASK, (long)&old, 0, 8, 0, 0);
	return pid;
}
*/
import "C"

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// canStartShared: this build starts children in new user namespaces
// through startShared.
const canStartShared = true

// stackSize is the child's stack between clone and exec: it runs one
// small C function. A guard page below it turns an overflow into a fault.
const stackSize = 64 << 10

// sharedFlags are the clone flags startShared passes on: namespaces only. A
// shared fd table, fs or signal handlers would let the child's set-up
// change the supervisor's.
const sharedFlags = unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNS | unix.CLONE_NEWNET |
	unix.CLONE_NEWIPC | unix.CLONE_NEWUTS | unix.CLONE_NEWCGROUP

// childSteps names the child's steps (STEP_* in the C code) for errors.
var childSteps = [...]string{1: "reset signal handlers", 2: "wait for id mappings", 3: "setsid",
	4: "setgroups", 5: "setresgid", 6: "setresuid", 7: "place fds", 8: "chdir", 9: "parent-death signal", 10: "exec"}

// testHook, when set by a test, runs after a start has made its pipes
// ("pipes") and after its clone ("cloned").
var testHook func(stage string)

// errUnsupported: startShared does not know how to start this command.
var errUnsupported = errors.New("spawn: unsupported attributes")

// startShared starts cmd as startLocked would, but in a child that shares
// the supervisor's memory until it execs (CLONE_VM) instead of a copy of
// it. Go's own start never does that for a new user namespace, whose child
// must wait for its id mappings, and so a fork copies (and on exec tears
// down) the supervisor's page tables and makes both sides take
// copy-on-write faults, a cost that grows with the daemon's heap
// (BenchmarkStartInitStage). It takes the subset of exec.Cmd and
// SysProcAttr that jail's init-stage start sets; what it does not know it
// refuses.
//
// The child shares the supervisor's memory map, and what the kernel does
// to a map reaches both. Two cases matter: the child's change of ids makes
// the map undumpable (undone below once the child has exec'd or been
// reaped, as long as the supervisor started dumpable), and an OOM kill of
// the child would kill every process sharing its map. The second cannot
// happen: the child is born outside any job cgroup, or (cgroup v2) in its
// job's fresh, empty one, and its own pages are charged to the
// supervisor's.
func startShared(cmd *exec.Cmd) (*os.Process, error) {
	attr := cmd.SysProcAttr
	if attr == nil || attr.Ptrace || attr.Setctty || attr.Noctty || attr.Foreground || attr.Setpgid ||
		attr.Chroot != "" || attr.Unshareflags != 0 || len(attr.AmbientCaps) != 0 || attr.PidFD != nil ||
		attr.Cloneflags&^sharedFlags != 0 || len(cmd.ExtraFiles) > 5 || cmd.Dir != "/" ||
		attr.Credential != nil && (len(attr.Credential.Groups) != 0 || attr.Credential.NoSetGroups) {
		return nil, errUnsupported
	}
	// The child's fds 0, 1 and 2 are files, as the init stage's are.
	stdin, ok0 := cmd.Stdin.(*os.File)
	stdout, ok1 := cmd.Stdout.(*os.File)
	stderr, ok2 := cmd.Stderr.(*os.File)
	files := append([]*os.File{stdin, stdout, stderr}, cmd.ExtraFiles...)
	if !ok0 || !ok1 || !ok2 || slices.Contains(files, nil) {
		return nil, errUnsupported
	}
	env := cmd.Env
	if env == nil {
		env = os.Environ()
	}

	s := (*C.struct_pmjail_spawn)(C.calloc(1, C.sizeof_struct_pmjail_spawn))
	defer C.free(unsafe.Pointer(s))
	s.path = C.CString(cmd.Path)
	defer C.free(unsafe.Pointer(s.path))
	s.argv = cStrings(cmd.Args)
	defer freeCStrings(s.argv, len(cmd.Args))
	s.envp = cStrings(env)
	defer freeCStrings(s.envp, len(env))
	for i, f := range files {
		s.fds[i] = C.int(f.Fd())
	}
	s.nfds = C.int(len(files))
	s.flags = C.uint64_t(attr.Cloneflags)
	s.cgroup_fd = -1
	if attr.UseCgroupFD {
		s.cgroup_fd = C.int(attr.CgroupFD)
	}
	if attr.Setsid {
		s.setsid = 1
	}
	if cred := attr.Credential; cred != nil {
		s.creds, s.uid, s.gid = 1, C.uint32_t(cred.Uid), C.uint32_t(cred.Gid)
		// As Go's start: a child whose gid_map was written with setgroups
		// denied cannot drop its groups, and need not.
		if len(attr.GidMappings) == 0 || attr.GidMappingsEnableSetgroups {
			s.setgroups = 1
		}
	}
	if attr.Pdeathsig != 0 {
		s.pdeathsig = C.int(attr.Pdeathsig)
		// In a new pid namespace the parent is outside it: pid 0.
		if attr.Cloneflags&unix.CLONE_NEWPID == 0 {
			s.ppid = C.long(os.Getpid())
		}
	}

	stack, err := unix.Mmap(-1, 0, stackSize+os.Getpagesize(), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_STACK)
	if err != nil {
		return nil, os.NewSyscallError("mmap", err)
	}
	defer unix.Munmap(stack) // only once the child no longer runs on it: see below
	if err := unix.Mprotect(stack[os.Getpagesize():], unix.PROT_READ|unix.PROT_WRITE); err != nil {
		return nil, os.NewSyscallError("mprotect", err)
	}
	s.stack, s.stack_size = unsafe.Pointer(&stack[os.Getpagesize()]), stackSize

	var syncPipe, errPipe [2]int
	if err := unix.Pipe2(syncPipe[:], unix.O_CLOEXEC); err != nil {
		return nil, os.NewSyscallError("pipe2", err)
	}
	defer unix.Close(syncPipe[1])
	if err := unix.Pipe2(errPipe[:], unix.O_CLOEXEC); err != nil {
		unix.Close(syncPipe[0])
		return nil, os.NewSyscallError("pipe2", err)
	}
	defer unix.Close(errPipe[0])
	s.sync_fd, s.sync_peer, s.err_fd = C.int(syncPipe[0]), C.int(syncPipe[1]), C.int(errPipe[1])
	if testHook != nil {
		testHook("pipes")
	}

	wasDumpable()
	runtime.LockOSThread()
	restore := func() error { return nil }
	if owner, ok := namespaceOwner(attr); ok {
		if restore, err = ownNamespacesAs(owner); err != nil {
			if !errors.Is(err, errThreadTainted) {
				runtime.UnlockOSThread()
			}
			unix.Close(syncPipe[0])
			unix.Close(errPipe[1])
			return nil, err
		}
	}
	// As in Go's own start: no fd may be half-made (not yet close-on-exec)
	// while a child copies the fd table.
	syscall.ForkLock.Lock()
	pid := int(C.pmjail_spawn_clone(s))
	syscall.ForkLock.Unlock()
	restoreErr := restore()
	if restoreErr == nil {
		runtime.UnlockOSThread()
	}
	unix.Close(syncPipe[0])
	unix.Close(errPipe[1])
	if pid < 0 {
		return nil, errors.Join(os.NewSyscallError("clone3", syscall.Errno(-pid)), restoreErr)
	}
	if testHook != nil {
		testHook("cloned")
	}
	// From here every way out leaves the child exec'd or reaped: only then
	// may its stack and the strings it reads go.
	reap := func(err error) (*os.Process, error) {
		_ = unix.Kill(pid, unix.SIGKILL)
		for {
			if _, werr := unix.Wait4(pid, nil, 0, nil); !errors.Is(werr, unix.EINTR) {
				break
			}
		}
		// It may have changed its ids before it failed.
		redump(attr)
		return nil, err
	}
	if restoreErr != nil {
		return reap(restoreErr)
	}
	if attr.Cloneflags&unix.CLONE_NEWUSER != 0 {
		if err := writeIDMaps(pid, attr); err != nil {
			// Not through the child: another child cloned meanwhile may
			// hold a copy of the pipe's write end until it execs.
			return reap(err)
		}
	}
	if _, err := unix.Write(syncPipe[1], []byte{0}); err != nil {
		return reap(fmt.Errorf("start %s: release the child: %w", cmd.Path, os.NewSyscallError("write", err)))
	}
	var report [8]byte
	n, err := readFull(errPipe[0], report[:])
	switch {
	case err != nil:
		return reap(fmt.Errorf("start %s: %w", cmd.Path, os.NewSyscallError("read spawn status", err)))
	case n == len(report):
		step := binary.NativeEndian.Uint32(report[:4])
		errno := syscall.Errno(binary.NativeEndian.Uint32(report[4:]))
		what := "step " + strconv.Itoa(int(step))
		if int(step) < len(childSteps) && childSteps[step] != "" {
			what = childSteps[step]
		}
		return reap(fmt.Errorf("start %s: %s: %w", cmd.Path, what, errno))
	case n != 0:
		return reap(fmt.Errorf("start %s: short status from the child (%d bytes)", cmd.Path, n))
	}
	// EOF: the child's end closed at its exec.
	redump(attr)
	return os.FindProcess(pid)
}

// redump makes this process dumpable again, as it was when it started,
// once a child that shared its memory map, and may have changed its ids
// (which made the map undumpable), has exec'd or died.
func redump(attr *syscall.SysProcAttr) {
	if attr.Credential != nil && wasDumpable() {
		_ = unix.Prctl(unix.PR_SET_DUMPABLE, 1, 0, 0, 0)
	}
}

// writeIDMaps writes the child's id mappings as Go's start does: uid_map,
// then setgroups, then gid_map.
func writeIDMaps(pid int, attr *syscall.SysProcAttr) error {
	dir := "/proc/" + strconv.Itoa(pid) + "/"
	setgroups := "deny"
	if attr.GidMappingsEnableSetgroups {
		setgroups = "allow"
	}
	for _, f := range []struct{ name, data string }{
		{"uid_map", formatIDMap(attr.UidMappings)},
		{"setgroups", setgroups},
		{"gid_map", formatIDMap(attr.GidMappings)},
	} {
		if f.data == "" {
			continue
		}
		if err := os.WriteFile(dir+f.name, []byte(f.data), 0); err != nil {
			return fmt.Errorf("write %s of the init stage: %w", f.name, err)
		}
	}
	return nil
}

func formatIDMap(m []syscall.SysProcIDMap) string {
	var b strings.Builder
	for _, e := range m {
		fmt.Fprintf(&b, "%d %d %d\n", e.ContainerID, e.HostID, e.Size)
	}
	return b.String()
}

// readFull reads until buf is full or EOF.
func readFull(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := unix.Read(fd, buf[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}

// cStrings is a NULL-terminated array of C copies of ss, all in C memory:
// the child reads it while the Go runtime runs on.
func cStrings(ss []string) **C.char {
	arr := (**C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	elems := unsafe.Slice(arr, len(ss))
	for i, s := range ss {
		elems[i] = C.CString(s)
	}
	return arr
}

// freeCStrings frees what cStrings made of n strings.
func freeCStrings(arr **C.char, n int) {
	for _, c := range unsafe.Slice(arr, n) {
		C.free(unsafe.Pointer(c))
	}
	C.free(unsafe.Pointer(arr))
}
