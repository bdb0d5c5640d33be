package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

const (
	cgroupRoot = "/sys/fs/cgroup"
	// The job limit and the allocation that must not fit in it.
	jobMemoryMax = "64M"
	allocMiB     = 200
	roleAlloc    = "selftest-alloc-child"
)

var wantControllers = []string{"memory", "pids", "cpu"}

// errSkip marks a check that does not apply to how the VM was started.
var errSkip = errors.New("not applicable")

// ownCgroup returns this process's cgroup v2 path ("/" for the root).
func ownCgroup() (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", fmt.Errorf("read own cgroup: %w", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		if path, ok := strings.CutPrefix(line, "0::"); ok {
			return path, nil
		}
	}
	return "", fmt.Errorf("no cgroup v2 entry in /proc/self/cgroup: %q", data)
}

func checkHierarchy() (string, error) {
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		return "", os.NewSyscallError("statfs "+cgroupRoot, err)
	}
	if st.Type != unix.CGROUP2_SUPER_MAGIC {
		return "", fmt.Errorf("%s is not cgroup2 (magic %#x)", cgroupRoot, st.Type)
	}
	if _, err := os.Stat("/sys/fs/cgroup/unified"); err == nil {
		return "", errors.New("a hybrid layout: /sys/fs/cgroup/unified exists")
	}
	data, err := os.ReadFile(filepath.Join(cgroupRoot, "cgroup.controllers"))
	if err != nil {
		return "", fmt.Errorf("read root controllers: %w", err)
	}
	have := strings.Fields(string(data))
	for _, c := range wantControllers {
		if !slices.Contains(have, c) {
			return "", fmt.Errorf("controller %s missing from %q", c, have)
		}
	}
	own, err := ownCgroup()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("controllers %q, own cgroup %s", have, own), nil
}

// checkRootChildOOM runs the OOM test in a cgroup created directly beneath
// the root while this process stays in the root: the root is exempt from
// the no-internal-process rule, so a supervisor run from PID 1's cgroup
// needs no leaf of its own.
func checkRootChildOOM() (string, error) {
	own, err := ownCgroup()
	if err != nil {
		return "", err
	}
	if own != "/" {
		return "", fmt.Errorf("%w: running in %s, not the root", errSkip, own)
	}
	job := filepath.Join(cgroupRoot, fmt.Sprintf("selftest-job-%d", os.Getpid()))
	if err := os.Mkdir(job, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", job, err)
	}
	defer os.Remove(job)
	return oomIn(job)
}

// checkDelegatedOOM plays a supervisor whose cgroup was delegated to it (a
// systemd Delegate=yes service): while it sits in that cgroup, enabling
// controllers for children must fail with EBUSY; after it moves itself into a
// leaf, enabling works and a job cgroup beside the leaf enforces memory.max.
func checkDelegatedOOM() (detail string, err error) {
	own, err := ownCgroup()
	if err != nil {
		return "", err
	}
	home := filepath.Join(cgroupRoot, own)
	base := home
	if own == "/" {
		base = filepath.Join(cgroupRoot, fmt.Sprintf("selftest-svc-%d", os.Getpid()))
		if err := os.Mkdir(base, 0o755); err != nil {
			return "", fmt.Errorf("create cgroup %s: %w", base, err)
		}
		defer removeCgroup(base, &err)
		if err := moveSelf(base); err != nil {
			return "", err
		}
		defer restoreSelf(home, &err)
	}

	control := filepath.Join(base, "cgroup.subtree_control")
	enable := "+" + strings.Join(wantControllers, " +")
	if err := os.WriteFile(control, []byte(enable), 0); !errors.Is(err, unix.EBUSY) {
		return "", fmt.Errorf("enable controllers while inside %s: want EBUSY (no internal processes), got %v", base, err)
	}

	leaf := filepath.Join(base, "supervisor")
	if err := os.Mkdir(leaf, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", leaf, err)
	}
	defer removeCgroup(leaf, &err)
	if err := moveSelf(leaf); err != nil {
		return "", err
	}
	// Leave the leaf before it is removed (deferred calls run in reverse).
	defer restoreSelf(base, &err)
	if err := os.WriteFile(control, []byte(enable), 0); err != nil {
		return "", fmt.Errorf("enable controllers in %s after moving into a leaf (other processes left in it?): %w", base, err)
	}
	defer func() {
		disable := "-" + strings.Join(wantControllers, " -")
		if werr := os.WriteFile(control, []byte(disable), 0); werr != nil && err == nil {
			err = fmt.Errorf("disable controllers in %s: %w", base, werr)
		}
	}()

	job := filepath.Join(base, "job")
	if err := os.Mkdir(job, 0o755); err != nil {
		return "", fmt.Errorf("create cgroup %s: %w", job, err)
	}
	defer removeCgroup(job, &err)
	for file, value := range map[string]string{"pids.max": "64", "cpu.max": "50000 100000"} {
		if err := os.WriteFile(filepath.Join(job, file), []byte(value), 0); err != nil {
			return "", fmt.Errorf("set %s in %s: %w", file, job, err)
		}
	}
	return oomIn(job)
}

// oomIn limits dir to jobMemoryMax, starts a child straight into it with
// CLONE_INTO_CGROUP, and wants the child OOM-killed while allocating
// allocMiB and memory.events' oom_kill to grow.
func oomIn(dir string) (string, error) {
	if err := os.WriteFile(filepath.Join(dir, "memory.max"), []byte(jobMemoryMax), 0); err != nil {
		return "", fmt.Errorf("set memory.max in %s: %w", dir, err)
	}
	// No swap in the VM, but a limit must not leak into swap where there is.
	if err := os.WriteFile(filepath.Join(dir, "memory.swap.max"), []byte("0"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("set memory.swap.max in %s: %w", dir, err)
	}
	before, err := oomKills(dir)
	if err != nil {
		return "", err
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", os.NewSyscallError("open "+dir, err)
	}
	defer unix.Close(fd)

	cmd := exec.Command("/proc/self/exe", roleAlloc, strconv.Itoa(allocMiB))
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: fd, Pdeathsig: syscall.SIGKILL}
	out, runErr := cmd.Output()
	ws, _ := cmd.ProcessState.Sys().(syscall.WaitStatus)
	if !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		return "", fmt.Errorf("child not SIGKILLed: %v, output %q", runErr, out)
	}
	placed := strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	if want := "0::" + strings.TrimPrefix(dir, cgroupRoot); placed != want {
		return "", fmt.Errorf("child started in %q, want %q", placed, want)
	}
	after, err := oomKills(dir)
	if err != nil {
		return "", err
	}
	if after <= before {
		return "", fmt.Errorf("memory.events oom_kill stayed at %d", after)
	}
	return fmt.Sprintf("child in %s SIGKILLed allocating %d MiB under memory.max=%s, oom_kill %d→%d",
		strings.TrimPrefix(dir, cgroupRoot), allocMiB, jobMemoryMax, before, after), nil
}

// runAllocChild reports its cgroup, then touches every page of a large
// allocation so the memory is really charged.
func runAllocChild() int {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	os.Stdout.Write(data)
	mib, err := strconv.Atoi(os.Args[2])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	buf := make([]byte, mib<<20)
	for i := 0; i < len(buf); i += os.Getpagesize() {
		buf[i] = 1
	}
	fmt.Println("survived")
	return 0
}

func oomKills(dir string) (int, error) {
	f, err := os.Open(filepath.Join(dir, "memory.events"))
	if err != nil {
		return 0, fmt.Errorf("read memory.events: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "oom_kill "); ok {
			return strconv.Atoi(v)
		}
	}
	return 0, fmt.Errorf("no oom_kill in %s/memory.events", dir)
}

// moveSelf moves the whole process (all threads) into dir.
func moveSelf(dir string) error {
	pid := strconv.Itoa(os.Getpid())
	if err := os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(pid), 0); err != nil {
		return fmt.Errorf("move self into %s: %w", dir, err)
	}
	return nil
}

func restoreSelf(dir string, errp *error) {
	if err := moveSelf(dir); err != nil && *errp == nil {
		*errp = err
	}
}

func removeCgroup(dir string, errp *error) {
	if err := unix.Rmdir(dir); err != nil && *errp == nil {
		*errp = fmt.Errorf("remove cgroup %s: %w", dir, os.NewSyscallError("rmdir", err))
	}
}
