package initstage

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// maxJoin bounds the task files one init stage accepts (pmjail uses five
// v1 hierarchies at most).
const maxJoin = 16

// joinCgroups moves the calling thread into the job's cgroup v1
// hierarchies through the task files the supervisor opened and sent (the
// kernel checks the opener's credentials) and closes them. It must run on
// the thread that will exec the runtime. Writing "0" to a v1 "tasks" file
// moves only the caller, which the kernel does without the global
// threadgroup lock, and so without the RCU grace period that moving a
// whole process from outside waits for (~8 ms, measured). The runtime's
// other threads stay where they were born and end at exec, which leaves
// the joined thread alone: the runtime runs entirely inside the job. It
// returns how many task files it wrote; only files on a cgroup file
// system are written.
func joinCgroups(fds []int) (int, error) {
	var errs []error
	for _, fd := range fds {
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
		return len(fds), fmt.Errorf("join the job's cgroup: %w", err)
	}
	return len(fds), nil
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
