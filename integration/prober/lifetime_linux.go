package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// Two roles for the trust-lifetime tests (integration/trust_lifetime_test.go),
// dispatched from main before the probes:
//
//	prober outlive       a guest that tries to outlive its supervisor
//	prober squat-leases  a host user that tries to take every job id slot

func init() {
	// The parent-death signal is per thread: the outliving guest clears it
	// on the thread the kernel armed, the one that exec'd, which main runs
	// on only if it was locked there during initialisation.
	if len(os.Args) > 1 && os.Args[1] == "outlive" {
		runtime.LockOSThread()
	}
}

// outlive clears its parent-death signal, says so with "ready <pid>
// cleared" ("refused" where the policy refused it) and then only sleeps. It refuses to run anywhere but near the top
// of a fresh pid namespace (a low pid, its parent outside the namespace or
// its pid 1) in the jail (hostname "pmjail"), so that outside a jail it
// does nothing at all.
func outlive() int {
	pid, ppid := os.Getpid(), os.Getppid()
	host, _ := os.Hostname()
	if pid > 64 || ppid > 1 || host != "pmjail" {
		fmt.Fprintf(os.Stderr, "prober outlive: pid %d, parent %d, hostname %q: not jailed, refusing to run\n", pid, ppid, host)
		return exitNotJailed
	}
	// A policy that filters prctl refuses this (EPERM): the guest then
	// stays all the same, and says which it was.
	cleared := "cleared"
	if err := unix.Prctl(unix.PR_SET_PDEATHSIG, 0, 0, 0, 0); errors.Is(err, unix.EPERM) {
		cleared = "refused"
	} else if err != nil {
		fmt.Fprintf(os.Stderr, "prober outlive: clear the parent-death signal: %v\n", err)
		return 1
	} else {
		var sig int32
		if err := unix.Prctl(unix.PR_GET_PDEATHSIG, ptr(&sig), 0, 0, 0); err != nil || sig != 0 {
			fmt.Fprintf(os.Stderr, "prober outlive: parent-death signal %d after clearing it (%v)\n", sig, err)
			return 1
		}
	}
	fmt.Printf("ready %d %s\n", pid, cleared)
	for {
		time.Sleep(50 * time.Millisecond)
	}
}

// squatLeases runs as an unprivileged host user. It binds every abstract
// name pmjail has leased job id slots under, and tries to create or lock
// the lease files of a lease directory, then prints "ready <bound> <files>"
// (how many of each it holds) and sleeps until its stdin closes. The test
// runs it in a network namespace of its own, so that it blocks no one else.
func squatLeases(dir string, slots int) int {
	if os.Geteuid() == 0 {
		fmt.Fprintln(os.Stderr, "prober squat-leases: runs as an unprivileged user only")
		return exitNotJailed
	}
	var held []int
	for slot := range slots {
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if errors.Is(err, unix.EMFILE) {
			// As many names as its descriptors allow (the VM allows
			// fewer), less a few kept for the lease files below.
			for _, fd := range held[max(0, len(held)-32):] {
				unix.Close(fd)
			}
			held = held[:max(0, len(held)-32)]
			break
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "prober squat-leases: socket: %v\n", err)
			return 1
		}
		if unix.Bind(fd, &unix.SockaddrUnix{Name: "@pmjail/ids/" + strconv.Itoa(slot)}) == nil {
			held = append(held, fd)
		} else {
			unix.Close(fd)
		}
	}
	bound := len(held)
	files := 0
	_ = os.MkdirAll(dir, 0o777)
	for slot := range slots {
		fd, err := unix.Open(dir+"/"+strconv.Itoa(slot), unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC, 0o666)
		if err != nil {
			break // a directory it cannot write: no slot is its to take
		}
		if unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB) == nil {
			files++
		} else {
			unix.Close(fd)
		}
	}
	fmt.Printf("ready %d %d\n", bound, files)
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	return 0
}

func init() {
	// pid1_creds reports, for every thread of the job's pid 1 (pmjail's
	// init stage, which stays for the run), its real, effective and saved
	// uids and its effective and permitted capabilities, as /proc shows
	// them: it must hold nothing the guest does not.
	probes["pid1_creds"] = func([]string) report {
		tasks, err := os.ReadDir("/proc/1/task")
		if err != nil {
			return result(unwrap(err))
		}
		var out []string
		for _, task := range tasks {
			status, err := os.ReadFile("/proc/1/task/" + task.Name() + "/status")
			if err != nil {
				return result(unwrap(err))
			}
			var line []string
			for _, l := range strings.Split(string(status), "\n") {
				if k, v, ok := strings.Cut(l, ":"); ok && (k == "Uid" || k == "Gid" || k == "CapEff" || k == "CapPrm") {
					line = append(line, k+"="+strings.Join(strings.Fields(v)[:min(3, len(strings.Fields(v)))], ","))
				}
			}
			out = append(out, strings.Join(line, " "))
		}
		return report{OK: true, Detail: out}
	}
}

func init() {
	// cpus reports the CPUs the prober may run on, as /proc shows them:
	// the init stage holds its own threads on one core while it drops
	// their capabilities, and the guest it starts must not inherit that.
	probes["cpus"] = func([]string) report {
		status, err := os.ReadFile("/proc/self/status")
		if err != nil {
			return result(unwrap(err))
		}
		for _, l := range strings.Split(string(status), "\n") {
			if k, v, ok := strings.Cut(l, ":"); ok && k == "Cpus_allowed_list" {
				return report{OK: true, Detail: strings.TrimSpace(v)}
			}
		}
		return report{OK: false, Detail: "no Cpus_allowed_list in /proc/self/status"}
	}
}
