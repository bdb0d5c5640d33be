package initstage

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// joinEnv carries the task files' fd range to the init stage.
const joinEnv = "PMJAIL_CGROUP_JOIN"

// maxJoin bounds the task files one init stage accepts (pmjail uses five
// v1 hierarchies at most).
const maxJoin = 16

// JoinEnv is the environment entry that tells the init stage to join the
// cgroups whose task files are the count fds from first on.
func JoinEnv(first, count int) string {
	return joinEnv + "=" + strconv.Itoa(first) + ":" + strconv.Itoa(count)
}

// parseJoin reads a JoinEnv value back.
func parseJoin(v string) (first, count int, err error) {
	a, b, ok := strings.Cut(v, ":")
	if ok {
		first, err = strconv.Atoi(a)
	}
	if ok && err == nil {
		count, err = strconv.Atoi(b)
	}
	if !ok || err != nil || first <= ControlFD || count < 1 || count > maxJoin {
		return 0, 0, fmt.Errorf("join the job's cgroup: bad %s %q", joinEnv, v)
	}
	return first, count, nil
}

// joinCgroups moves the calling thread into the job's cgroup v1
// hierarchies through the task files the supervisor opened (the kernel
// checks the opener's credentials) and closes them. It must run on the
// thread that will exec the runtime. Writing "0" to a v1 "tasks" file moves
// only the caller, which the kernel does without the global threadgroup
// lock, and so without the RCU grace period that moving a whole process
// from outside waits for (~8 ms). The runtime's other threads stay where
// they were born and end at exec, which leaves the joined thread alone:
// the runtime runs entirely inside the job. It returns how many task files
// it wrote; only files on a cgroup file system are written.
func joinCgroups() (int, error) {
	v, ok := os.LookupEnv(joinEnv)
	if !ok {
		return 0, nil
	}
	first, count, err := parseJoin(v)
	if err != nil {
		return 0, err
	}
	var errs []error
	for fd := first; fd < first+count; fd++ {
		var fs unix.Statfs_t
		if err := unix.Fstatfs(fd, &fs); err != nil {
			errs = append(errs, fmt.Errorf("fd %d: %w", fd, os.NewSyscallError("fstatfs", err)))
		} else if fs.Type != unix.CGROUP_SUPER_MAGIC {
			errs = append(errs, fmt.Errorf("fd %d: a task file is not on a cgroup file system", fd))
		} else if _, err := unix.Write(fd, []byte("0")); err != nil {
			errs = append(errs, fmt.Errorf("fd %d: %w", fd, os.NewSyscallError("write tasks", err)))
		}
		unix.Close(fd)
	}
	if err := errors.Join(errs...); err != nil {
		return count, fmt.Errorf("join the job's cgroup: %w", err)
	}
	return count, nil
}
