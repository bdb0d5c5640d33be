package main

import (
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// held keeps the inotify instances inotify_flood made, and the pipes
// pipe_flood made, open until the prober exits, so that the test can look
// at the host meanwhile.
var held []int

// release receives the test's SIGUSR1 for hold. It is registered at start:
// a signal that came before hold began would otherwise be lost.
var release = make(chan os.Signal, 1)

// numbers parses a probe's numeric arguments; a bad one is 0.
func numbers(a []string) []uintptr {
	out := make([]uintptr, len(a))
	for i, s := range a {
		n, _ := strconv.ParseUint(s, 0, 64)
		out[i] = uintptr(n)
	}
	return out
}

func init() {
	signal.Notify(release, syscall.SIGUSR1)

	// --- address families: socket=FAMILY,TYPE,PROTOCOL and
	// socketpair=FAMILY,TYPE, numbers as in <sys/socket.h> ---
	probes["socket"] = func(a []string) report {
		n := append(numbers(a), 0, 0, 0)
		r := sys(unix.SYS_SOCKET, n[0], n[1], n[2])
		if r.OK {
			unix.Close(int(r.Detail.(uintptr)))
		}
		return r
	}
	probes["socketpair"] = func(a []string) report {
		n := append(numbers(a), 0, 0)
		var fds [2]int32
		r := sys(unix.SYS_SOCKETPAIR, n[0], n[1], 0, ptr(&fds))
		if r.OK {
			unix.Close(int(fds[0]))
			unix.Close(int(fds[1]))
		}
		return r
	}

	// --- rlimits: prlimit=PID reads PID's RLIMIT_CPU and writes back
	// the very value it read (a change of nothing, wherever it runs);
	// detail is the soft limit. On pid 1, lowering it instead ended the
	// job's pid 1, and the job: the guest runs as pid 1's ids. ---
	probes["prlimit"] = func(a []string) report {
		pid := numbers(a)[0]
		var old unix.Rlimit
		if r := sys(unix.SYS_PRLIMIT64, pid, unix.RLIMIT_CPU, 0, ptr(&old)); !r.OK {
			return r
		}
		if r := sys(unix.SYS_PRLIMIT64, pid, unix.RLIMIT_CPU, ptr(&old), 0); !r.OK {
			return r
		}
		return report{OK: true, Detail: old.Cur}
	}

	// --- prctl options ---
	// Clearing the parent-death signal would let the guest outlive a
	// supervisor that dies; setting another signal clears it as well.
	probes["prctl_pdeathsig_clear"] = func([]string) report { return sys(unix.SYS_PRCTL, unix.PR_SET_PDEATHSIG, 0) }
	probes["prctl_set_name"] = func([]string) report { return sys(unix.SYS_PRCTL, unix.PR_SET_NAME, cstr("prober")) }
	probes["prctl_get_name"] = func([]string) report {
		var name [16]byte
		return sys(unix.SYS_PRCTL, unix.PR_GET_NAME, ptr(&name))
	}
	// prctl=OPTION,ARG2: any other option, numbers as in <linux/prctl.h>.
	probes["prctl"] = func(a []string) report {
		n := append(numbers(a), 0, 0)
		return sys(unix.SYS_PRCTL, n[0], n[1])
	}

	// --- per-user kernel budgets ---
	// inotify_flood makes inotify instances until the kernel refuses one
	// (at most 1024) and keeps them open; detail is how many it got.
	probes["inotify_flood"] = func([]string) report {
		for len(held) < 1024 {
			fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
			if err != nil {
				r := result(err)
				r.Detail = len(held)
				return r
			}
			held = append(held, fd)
		}
		return report{OK: true, Detail: len(held)}
	}
	// pipe_flood makes pipes and grows each to 1 MiB (pipe-max-size's
	// default) until the kernel refuses one (its user's
	// fs.pipe-user-pages-soft spent) or 256 are grown, and keeps them
	// open; detail is how many it grew.
	probes["pipe_flood"] = func([]string) report {
		for n := 0; n < 256; n++ {
			var p [2]int
			if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
				r := result(err)
				r.Detail = n
				return r
			}
			held = append(held, p[0], p[1])
			if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, 1<<20); err != nil {
				r := result(err)
				r.Detail = n
				return r
			}
		}
		return report{OK: true, Detail: 256}
	}
	// pipe_grow makes a pipe and grows it to 1 MiB; detail is the size
	// it had at first.
	probes["pipe_grow"] = func([]string) report {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			return result(err)
		}
		defer unix.Close(p[0])
		defer unix.Close(p[1])
		first, err := unix.FcntlInt(uintptr(p[0]), unix.F_GETPIPE_SZ, 0)
		if err == nil {
			_, err = unix.FcntlInt(uintptr(p[0]), unix.F_SETPIPE_SZ, 1<<20)
		}
		r := result(err)
		r.Detail = first
		return r
	}
	// pipe_grow_fd=FD grows FD, a pipe the prober inherited (its stdout
	// and stderr, which the supervisor made), to 1 MiB; detail is the size
	// it had at first. The kernel charges a pipe's pages to the user that
	// made it, whoever grows it: after pipe_flood, a grow charged to the
	// guest's own uid is refused, one charged to another user is not.
	probes["pipe_grow_fd"] = func(a []string) report {
		fd := numbers(a)[0]
		first, err := unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if err == nil {
			_, err = unix.FcntlInt(fd, unix.F_SETPIPE_SZ, 1<<20)
		}
		r := result(err)
		r.Detail = first
		return r
	}
	// hold waits for SIGUSR1 from the test (a minute at most), keeping
	// whatever earlier probes hold; its report says whether the signal came.
	probes["hold"] = func([]string) report {
		select {
		case <-release:
			return report{OK: true}
		case <-time.After(time.Minute):
			return report{Errno: "timeout"}
		}
	}

	// --- the host's device nodes bound into the root ---
	// utime_now=PATH sets PATH's times to now, as touch(1) does: the
	// kernel lets anyone who may write a file do that, owner or not.
	probes["utime_now"] = func(a []string) report {
		now := []unix.Timespec{{Nsec: unix.UTIME_NOW}, {Nsec: unix.UTIME_NOW}}
		return result(unix.UtimesNanoAt(unix.AT_FDCWD, a[0], now, 0))
	}
	// write_byte=PATH writes one zero byte to PATH, an existing file.
	probes["write_byte"] = func(a []string) report {
		fd, err := unix.Open(a[0], unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return result(err)
		}
		defer unix.Close(fd)
		_, err = unix.Write(fd, []byte{0})
		return result(err)
	}

	// --- what the guest inherits from its supervisor ---
	// priority reports the guest's nice value and oom_score_adj.
	probes["priority"] = func([]string) report {
		prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
		if err != nil {
			return result(err)
		}
		adj, err := os.ReadFile("/proc/self/oom_score_adj")
		if err != nil {
			return result(unwrap(err))
		}
		n, _ := strconv.Atoi(strings.TrimSpace(string(adj)))
		return report{OK: true, Detail: map[string]int{"nice": 20 - prio, "oom_score_adj": n}}
	}

	// raise_priority=N sets the guest's own nice value to -N, which takes
	// no privilege within its RLIMIT_NICE; detail is its nice value after.
	probes["raise_priority"] = func(a []string) report {
		n, err := strconv.Atoi(a[0])
		if err != nil {
			return result(err)
		}
		r := result(unix.Setpriority(unix.PRIO_PROCESS, 0, -n))
		if prio, err := unix.Getpriority(unix.PRIO_PROCESS, 0); err == nil {
			r.Detail = map[string]int{"nice": 20 - prio}
		}
		return r
	}

	// --- the supervisor's share of a denial flood ---
	// deny_flood=MILLIS calls floodNR (sysfs(2) on amd64), which every policy refuses, in a
	// loop until the prober has spent MILLIS milliseconds of CPU (a minute
	// of wall time at most, on a busy host); detail is the number of calls
	// and the errno is the last one's.
	probes["deny_flood"] = func(a []string) report {
		ms, _ := strconv.Atoi(a[0])
		budget := time.Duration(ms) * time.Millisecond
		fsname := cstr("proc")
		deadline := time.Now().Add(time.Minute)
		var calls int
		var last syscall.Errno
		for cpuTime() < budget && time.Now().Before(deadline) {
			for range 100 {
				_, _, last = unix.Syscall(floodNR, 1, fsname, 0)
				calls++
			}
		}
		if last == 0 {
			return report{OK: true, Detail: calls}
		}
		return report{Errno: unix.ErrnoName(last), Detail: calls}
	}
}

// cpuTime is the CPU time the prober has spent, all threads.
func cpuTime() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts)
	return time.Duration(ts.Nano())
}
