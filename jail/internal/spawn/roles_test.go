package spawn

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// parent (parentRole) starts a probe through the shared start with its
// fds 3 and 4 crossed over (the child's 3 is this process's 4 and the
// other way round, and the child's stdout is this process's 3): every
// source is another slot's target.
func parent() {
	three, four := os.NewFile(3, "three"), os.NewFile(4, "four")
	exe, _ := os.Executable()
	cmd := &exec.Cmd{Path: exe, Args: []string{exe, probeRole}, Dir: "/",
		Stdin: os.Stdin, Stdout: three, Stderr: os.Stderr, ExtraFiles: []*os.File{four, three},
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}}
	proc, err := startShared(cmd)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	st, err := proc.Wait()
	if err != nil || !st.Success() {
		fmt.Fprintln(os.Stderr, "probe:", st, err)
		os.Exit(3)
	}
	os.Exit(0)
}

// lowFDs (lowFDsRole) starts a missing program through the shared start
// with its own fds 0 to 2 closed, so that the start's pipes take the
// lowest numbers and the status pipe's write end gets a number among the
// child's slots. The start must fail, saying why. Only stdio is closed:
// the runtime keeps fds of its own open (its netpoller's, and the cgroup
// CPU limit files of newer Go), and closing those crashes it some time
// later.
func lowFDs() {
	out, err := os.CreateTemp("", "spawn-")
	if err != nil {
		os.Exit(2)
	}
	os.Remove(out.Name())
	high, err := unix.FcntlInt(out.Fd(), unix.F_DUPFD_CLOEXEC, 100)
	if err != nil {
		os.Exit(2)
	}
	out.Close()
	f := os.NewFile(uintptr(high), "out")
	for fd := 0; fd <= 2; fd++ {
		unix.Close(fd)
	}
	// The sync pipe takes 0 and 1, the status pipe 2 and the lowest free
	// fd above; the slots reach past that.
	next, err := unix.Open(os.DevNull, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil || next != 0 {
		os.Exit(2)
	}
	unix.Close(next)
	spare, err := unix.FcntlInt(uintptr(high), unix.F_DUPFD_CLOEXEC, 3)
	if err != nil {
		os.Exit(2)
	}
	unix.Close(spare)
	extra := make([]*os.File, spare) // slots 3 .. spare+2
	for i := range extra {
		extra[i] = f
	}
	cmd := &exec.Cmd{Path: "/nonexistent/pmjail-init", Args: []string{"x"}, Dir: "/",
		Stdin: f, Stdout: f, Stderr: f, ExtraFiles: extra,
		SysProcAttr: &syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}}
	proc, err := startShared(cmd)
	switch {
	case err == nil:
		proc.Wait()
		os.Exit(4) // started a program that is not there
	case !strings.Contains(err.Error(), "exec: no such file or directory"):
		os.Exit(5)
	}
	os.Exit(0)
}

// Exit codes of refusedClone3, for the test's message.
const (
	refusedSetUp      = 2 // the filter could not be installed
	refusedStart      = 3 // Start failed
	refusedInCgroup   = 4 // Start said the child was born in its cgroup
	refusedForgot     = 5 // the shared start's refusal was not remembered
	refusedChild      = 6 // a child did not exit 0
	refusedSecondFail = 7 // a start after the refusal failed
)

// refusedClone3 (noClone3Role) is refused clone3 with ENOSYS, as under
// Docker's default seccomp profile, and starts a probe in a new user
// namespace and the "cgroup" fd 3: a directory that is no cgroup, so that
// a clone3 that got through would fail. Start must fall back to clone and
// say the child is not in its cgroup; a second start must succeed too.
func refusedClone3() {
	filter := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: 0}, // seccomp_data.nr
		{Code: unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, K: unix.SYS_CLONE3, Jt: 0, Jf: 1},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS)},
		{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW},
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		fmt.Fprintln(os.Stderr, "no_new_privs:", err)
		os.Exit(refusedSetUp)
	}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC,
		uintptr(unsafe.Pointer(&prog))); errno != 0 {
		fmt.Fprintln(os.Stderr, "seccomp:", errno)
		os.Exit(refusedSetUp)
	}
	devNull, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
	if err != nil {
		os.Exit(refusedSetUp)
	}
	run := func(useCgroupFD bool) {
		attr := testAttr(unix.CLONE_NEWUSER | unix.CLONE_NEWPID)
		attr.UseCgroupFD, attr.CgroupFD = useCgroupFD, 3
		cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{"probe", probeRole}, Dir: "/",
			Stdin: devNull, Stdout: devNull, Stderr: os.Stderr, SysProcAttr: attr}
		proc, intoCgroup, err := Start(cmd)
		if err != nil {
			fmt.Fprintln(os.Stderr, "start:", err)
			if useCgroupFD {
				os.Exit(refusedStart)
			}
			os.Exit(refusedSecondFail)
		}
		st, err := proc.Wait()
		switch {
		case err != nil || !st.Success():
			fmt.Fprintln(os.Stderr, "probe:", st, err)
			os.Exit(refusedChild)
		case intoCgroup:
			os.Exit(refusedInCgroup)
		}
	}
	run(true)
	if canStartShared && !noClone3.Load() {
		os.Exit(refusedForgot)
	}
	run(false)
	os.Exit(0)
}
