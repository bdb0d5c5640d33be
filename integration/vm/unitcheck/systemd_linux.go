package main

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

const (
	serviceUnit = "pmjail.service"
	socketUnit  = "pmjail.socket"
	cgroupRoot  = "/sys/fs/cgroup"
)

// systemctl runs systemctl and returns its output.
func systemctl(args ...string) (string, error) {
	out, err := exec.Command("systemctl", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("systemctl %s: %w: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return strings.TrimSpace(string(out)), nil
}

// properties returns a unit's properties, as systemctl show gives them.
func properties(unit string, names ...string) (map[string]string, error) {
	out, err := systemctl("show", unit, "-p", strings.Join(names, ","))
	if err != nil {
		return nil, err
	}
	props := make(map[string]string, len(names))
	for line := range strings.SplitSeq(out, "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			props[k] = v
		}
	}
	return props, nil
}

// mainPID is the service's main process as systemd knows it (0: none).
func mainPID() (int, error) {
	props, err := properties(serviceUnit, "MainPID")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(props["MainPID"])
}

// wantState checks a unit's ActiveState.
func wantState(unit, want string) error {
	props, err := properties(unit, "ActiveState", "SubState", "Result")
	if err != nil {
		return err
	}
	if props["ActiveState"] != want {
		return fmt.Errorf("%s is %s/%s (result %s), want %s", unit, props["ActiveState"], props["SubState"], props["Result"], want)
	}
	return nil
}

// errNotYet is what a polled condition returns until it holds.
var errNotYet = errors.New("not yet")

// poll calls cond until it returns nil or an error other than one wrapping
// errNotYet, or until the timeout, when it returns cond's last error.
// Under TCG everything is slow: timeouts are generous.
func poll(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil || !errors.Is(err, errNotYet) {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after %v: %w", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesNamed lists the pids whose command is one of names.
func processesNamed(names ...string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil {
			continue
		}
		if name := strings.TrimSpace(string(comm)); slices.Contains(names, name) {
			found = append(found, fmt.Sprintf("%s (pid %s)", name, filepath.Base(dir)))
		}
	}
	return found
}

// pidsNamed returns the pids of the processes whose command is one of
// names.
func pidsNamed(names ...string) []int {
	var pids []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		comm, err := os.ReadFile(filepath.Join(dir, "comm"))
		if err != nil || !slices.Contains(names, strings.TrimSpace(string(comm))) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(dir)); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// pidfdPid is the pid a pidfd names, from its fdinfo (-1: exited or
// unread).
func pidfdPid(fd int) int {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/self/fdinfo/%d", fd))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Pid:"); ok {
			if pid, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return pid
			}
		}
	}
	return -1
}

// jailProcesses are the commands of a daemon and its jobs.
var jailProcesses = []string{"pmjail", "pmjail-serve", "pmjail-init", "deno"}

// jobCgroups lists the job cgroups under the service's cgroup dir:
// everything but the daemon's own leaf and, unless withPrestarted, the
// cgroups of init stages started ahead of runs.
func jobCgroups(dir string, withPrestarted bool) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var jobs []string
	for _, e := range entries {
		name := e.Name()
		if !e.IsDir() || !strings.HasPrefix(name, "pmjail-") || name == "pmjail-supervisor" {
			continue
		}
		if !withPrestarted && strings.Contains(name, "-prestart-") {
			continue
		}
		jobs = append(jobs, name)
	}
	return jobs, nil
}
