package jail

import (
	"errors"
	"os"
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/internal/cleanup"
	"github.com/pmjail/pmjail/jail/initstage"
	"github.com/pmjail/pmjail/jail/internal/spawn"
)

// child is a started init stage and the supervisor's ends of it. It waits
// in its namespaces, under its lease of host ids, for the configuration
// that says what to build and run: until that arrives it runs nothing of a
// job, so it can be started before its job is known (see Pool).
type child struct {
	proc  *os.Process
	lease *idLease
	// ctl is the host end of the control socket.
	ctl *os.File
	// stdout and stderr are the read ends of the child's output pipes.
	stdout, stderr *os.File
	// intoCgroup: it started in the job's cgroup (CLONE_INTO_CGROUP).
	intoCgroup bool
	// initTasks is pid 1's share of the job's tasks (Outcome.InitTasks):
	// its one thread (initThread), or as many tasks of the job's cgroup as
	// the start gate counted (see openGate).
	initTasks uint64
	// cgroup is the cgroup a pooled child waits with (PoolOptions.Cgroups)
	// until a run adopts it; nil otherwise.
	cgroup Cgroup
	// plan is the root a pooled child mounts ahead (an encoded
	// initstage.Premount), nil for none.
	plan []byte
	// unwatch ends the pool's wait for a pooled child's death
	// (Pool.watch); nil when none waits.
	unwatch func()
}

// stopWatch ends the pool's wait for c's death, if one waits: c leaves
// the pool, for a run or to be discarded.
func (c *child) stopWatch() {
	if c.unwatch != nil {
		c.unwatch()
	}
}

// startChild starts an init stage in the namespaces flags. On cgroup v2
// it starts in cg, the job's cgroup; otherwise it joins (v1) or is moved
// into one at hand-over. A failure names the step (stage) that failed.
func startChild(flags uintptr, cg Cgroup) (*child, initstage.Stage, error) {
	// undo gives back what a start that fails holds; the child owns the
	// rest (the lease, the control socket's host end, the pipes' read
	// ends) once it runs. The child's own ends close either way: it has
	// its copies once started.
	var undo cleanup.Cleanup
	defer undo.Clean()
	var closing []*os.File
	defer func() { closeAll(closing) }()

	lease, err := leaseIDs()
	if err != nil {
		return nil, initstage.StageIDs, err
	}
	undo.Add(lease.release)
	ctlHost, ctlChild, err := socketPair()
	if err != nil {
		return nil, initstage.StageControlSocket, err
	}
	undo.Add(func() { ctlHost.Close() })
	closing = append(closing, ctlChild)
	// fd 3 is the guest channel's slot: held by a placeholder until the init
	// stage puts the channel there, so nothing of its own can take it. The
	// same /dev/null serves as stdin.
	placeholder, err := os.Open(os.DevNull)
	if err != nil {
		return nil, initstage.StagePlaceholder, err
	}
	closing = append(closing, placeholder)
	// The output pipes are charged to the job's guest id, not to root:
	// the guest holds their write ends, and may grow them (guestPipes).
	pipes, err := guestPipes(lease.guestID(), 2)
	if err != nil {
		return nil, initstage.StageStdoutPipe, err
	}
	outR, outW, errR, errW := pipes[0][0], pipes[0][1], pipes[1][0], pipes[1][1]
	undo.Add(func() { outR.Close() })
	undo.Add(func() { errR.Close() })
	closing = append(closing, outW, errW)

	cmd := &exec.Cmd{
		Path:        FindInitStage().Path,
		Args:        []string{"pmjail-init", initstage.Role},
		Env:         initStageEnv,
		Dir:         "/",
		Stdin:       placeholder,
		Stdout:      outW,
		Stderr:      errW,
		ExtraFiles:  []*os.File{placeholder, ctlChild},
		SysProcAttr: childAttr(flags, lease),
	}
	if fd, ok := cgroupFD(cg); ok {
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
	}
	proc, intoCgroup, err := spawn.Start(cmd)
	if err != nil {
		return nil, initstage.StageStart, err
	}
	if err := lease.hold(proc.Pid); err != nil {
		_ = proc.Signal(syscall.SIGKILL)
		_, _ = proc.Wait()
		return nil, initstage.StageIDs, err
	}
	undo.Release()
	return &child{proc: proc, lease: lease, ctl: ctlHost, stdout: outR, stderr: errR, intoCgroup: intoCgroup, initTasks: initThread}, initstage.StageNone, nil
}

// waiting reports whether the child is still waiting for its
// configuration: the init stage writes nothing before it has one, so a
// readable or hung-up control socket means it has died.
func (c *child) waiting() bool {
	fds := []unix.PollFd{{Fd: int32(c.ctl.Fd()), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		return err == nil && n == 0
	}
}

// discard kills a child that never got a job, reaps it and frees what the
// supervisor holds of it, its cgroup included. It returns why that cgroup
// could not be removed.
func (c *child) discard() error {
	_ = c.proc.Signal(syscall.SIGKILL)
	_, _ = c.proc.Wait()
	c.ctl.Close()
	c.stdout.Close()
	c.stderr.Close()
	c.lease.release()
	if c.cgroup == nil {
		return nil
	}
	return c.cgroup.Delete()
}

// childAttr is the whole contract of starting the init stage: the
// namespaces flags, the id mappings of the lease, a new session without a
// terminal and death with the supervisor.
func childAttr(flags uintptr, lease *idLease) *syscall.SysProcAttr {
	attr := &syscall.SysProcAttr{
		Cloneflags: flags,
		Credential: &syscall.Credential{Uid: nsRootID, Gid: nsRootID, Groups: []uint32{}},
		Setsid:     true,
		Pdeathsig:  syscall.SIGKILL,
	}
	if flags&unix.CLONE_NEWUSER != 0 {
		attr.UidMappings = []syscall.SysProcIDMap{
			{ContainerID: nsRootID, HostID: lease.rootID(), Size: 1},
			{ContainerID: guestID, HostID: lease.guestID(), Size: 1},
		}
		attr.GidMappings = []syscall.SysProcIDMap{
			{ContainerID: nsRootID, HostID: lease.rootID(), Size: 1},
			{ContainerID: guestID, HostID: lease.guestID(), Size: 1},
		}
		attr.GidMappingsEnableSetgroups = true
	}
	return attr
}
