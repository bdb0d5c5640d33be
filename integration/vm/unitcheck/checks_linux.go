package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/jail"
)

// Where the package puts things, and what the operator adds, as
// docs/daemon.md says.
const (
	packageName = "pmjail"
	binDir      = "/usr/bin"
	unitDir     = "/usr/lib/systemd/system"
	dropInDir   = "/etc/systemd/system/" + serviceUnit + ".d"
	exampleJSON = "/usr/share/doc/pmjail/examples/config.example.json"
	configPath  = "/etc/pmjail/config.json"
	secretPath  = "/etc/pmjail/secrets/example-api"
	stateDir    = "/var/lib/pmjail"
	socketPath  = "/run/pmjail/pmjail.sock"
	groupName   = "pmjail"
	nobodyUID   = 65534
	nogroupGID  = 65534
	serviceLog  = "/var/log/pmjail-service.log"
	startupTime = 2 * time.Minute // a daemon's start under TCG, its host probe included
	// Pyodide is left out of the install (dpkg --path-exclude): the
	// daemon builds its snapshot at every start, minutes of CPU under
	// TCG, and the checks run Deno only.
	pyodideFiles = "/usr/lib/pmjail/node_modules/pyodide/*"
)

// env is what the checks learn as they go.
type env struct {
	deb    string // the package file
	gid    uint32 // the pmjail group's
	pid    int    // the daemon's, as systemd last reported it
	cgroup string // the service's cgroup directory
}

// member is a user the config lets in: nobody, in the pmjail group.
func (e *env) member() peer { return peer{nobodyUID, e.gid} }

func (e *env) install() (string, error) {
	if out, err := dpkg("-i", "--path-exclude="+pyodideFiles, e.deb); err != nil {
		return "", err
	} else if !strings.Contains(out, "Setting up "+packageName) {
		return "", fmt.Errorf("dpkg -i did not set up %s: %s", packageName, out)
	}
	status, err := dpkg("-s", packageName)
	if err != nil || !strings.Contains(status, "Status: install ok installed") {
		return "", fmt.Errorf("dpkg -s %s: %v\n%s", packageName, err, status)
	}
	for _, name := range []string{"pmjail", "pmjail-serve", "pmjail-init"} {
		if st, err := os.Stat(filepath.Join(binDir, name)); err != nil || st.Mode().Perm() != 0o755 {
			return "", fmt.Errorf("the package's %s: %v", name, err)
		}
	}
	// The postinst made the group (systemd-sysusers, from the package's
	// sysusers.d file).
	gid, err := lookupGroup(groupName)
	if err != nil {
		return "", fmt.Errorf("after the package's postinst: %w", err)
	}
	e.gid = gid
	// The operator's steps: the example config as it ships, which lets the
	// pmjail group in and names a secret file, which must exist.
	if err := copyFile(exampleJSON, configPath, 0o644); err != nil {
		return "", err
	}
	if err := writeFile(secretPath, "Bearer vm-check\n", 0o600); err != nil {
		return "", err
	}
	// The VM runs no journald: the daemon's log goes to a file instead,
	// printed if a check fails. Nothing else of the unit is changed.
	dropIn := "[Service]\nStandardOutput=append:" + serviceLog + "\nStandardError=inherit\n"
	if err := writeFile(serviceLog, "", 0o640); err != nil {
		return "", err
	}
	if err := writeFile(filepath.Join(dropInDir, "vm-log.conf"), dropIn, 0o644); err != nil {
		return "", err
	}
	if _, err := systemctl("daemon-reload"); err != nil {
		return "", err
	}
	if _, err := systemctl("enable", "--now", socketUnit); err != nil {
		return "", err
	}
	version, _ := dpkg("-f", e.deb, "Version")
	return fmt.Sprintf("%s %s: binaries in %s, units in %s; group %s (gid %d); %s from the example", packageName, version, binDir, unitDir, groupName, gid, configPath), nil
}

func (e *env) socketOnly() (string, error) {
	st, err := os.Stat(socketPath)
	if err != nil {
		return "", err
	}
	sys := st.Sys().(*syscall.Stat_t)
	if st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 || sys.Uid != 0 || sys.Gid != e.gid {
		return "", fmt.Errorf("%s: mode %v, owner %d:%d; want a socket, 0660, 0:%d", socketPath, st.Mode(), sys.Uid, sys.Gid, e.gid)
	}
	if err := wantState(socketUnit, "active"); err != nil {
		return "", err
	}
	if err := wantState(serviceUnit, "inactive"); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s %v root:%s; %s inactive", socketPath, st.Mode(), groupName, serviceUnit), nil
}

func (e *env) activate() (string, error) {
	o, err := answer(e.member(), "health")
	if err != nil {
		return "", err
	}
	if err := poll(time.Minute, func() error { return e.serving(o.Health.PID) }); err != nil {
		return "", err
	}
	log, _ := os.ReadFile(serviceLog)
	if !strings.Contains(string(log), `"socket_activated":true`) {
		return "", fmt.Errorf("the daemon did not log that systemd handed it the socket")
	}
	return fmt.Sprintf("daemon pid %d (pmjail-serve, systemd's MainPID) in %s/pmjail-supervisor", e.pid, strings.TrimPrefix(e.cgroup, cgroupRoot)), nil
}

// serving checks that systemd has the service running with daemonPID (the
// pid the daemon's health reports) as its main process, the process that
// pmjail serve became, in the leaf of the delegated cgroup it moves to.
// Its error wraps errNotYet while systemd has yet to see the daemon ready.
func (e *env) serving(daemonPID int) error {
	props, err := properties(serviceUnit, "ActiveState", "SubState", "MainPID", "ControlGroup")
	if err != nil {
		return err
	}
	switch state := props["ActiveState"] + "/" + props["SubState"]; state {
	case "active/running":
	case "activating/start", "reloading/reload":
		// The daemon answers before systemd has read its READY=1.
		return fmt.Errorf("%w: %s is %s", errNotYet, serviceUnit, state)
	default:
		return fmt.Errorf("%s is %s, want active/running", serviceUnit, state)
	}
	pid, _ := strconv.Atoi(props["MainPID"])
	if pid == 0 || pid != daemonPID {
		return fmt.Errorf("systemd's MainPID %d is not the daemon's pid %d", pid, daemonPID)
	}
	comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	if err != nil || strings.TrimSpace(string(comm)) != "pmjail-serve" {
		return fmt.Errorf("MainPID %d runs %q, want pmjail-serve (pmjail serve execs it)", pid, strings.TrimSpace(string(comm)))
	}
	own, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	if err != nil {
		return err
	}
	if want := "0::" + props["ControlGroup"] + "/pmjail-supervisor"; strings.TrimSpace(string(own)) != want {
		return fmt.Errorf("the daemon's cgroup is %q, want %q", strings.TrimSpace(string(own)), want)
	}
	e.pid, e.cgroup = pid, filepath.Join(cgroupRoot, props["ControlGroup"])
	return nil
}

// posture is the part of a result's posture the checks read.
type posture struct {
	Mode     string `json:"mode"`
	Decision string `json:"decision"`
	Layers   []struct {
		Name   string `json:"name"`
		State  string `json:"state"`
		Detail string `json:"detail"`
	} `json:"layers"`
}

func postureOf(res *jail.Result) (*posture, error) {
	raw, err := json.Marshal(res.Posture)
	if err != nil {
		return nil, err
	}
	var p posture
	return &p, json.Unmarshal(raw, &p)
}

// tcgLimits are the Deno jobs' limits: the example config's ceiling
// rather than the defaults (10 s of CPU, 30 s of wall time). Under TCG a
// cold Deno start costs seconds of guest CPU, and when the host is busy
// the time QEMU's vCPU thread waits for a host CPU is charged to the task
// the guest was running: a hello has been seen at 17 s of "CPU".
const tcgLimits = `{"cpu_time": "30s", "timeout": "2m"}`

// runJob runs a job as a member and checks it ended ok.
func (e *env) runJob(jobJSON string) (*jail.Result, *posture, error) {
	o, err := answer(e.member(), "run", jobJSON)
	if err != nil {
		return nil, nil, err
	}
	res := o.Result
	if res.Status != jail.StatusOK {
		return nil, nil, fmt.Errorf("status %s (exit %d): %+v; stderr %q", res.Status, res.ExitCode, res.Error, res.Stderr)
	}
	p, err := postureOf(res)
	return res, p, err
}

func (e *env) runHandler() (string, error) {
	res, p, err := e.runJob(`{"runtime": "deno", "limits": ` + tcgLimits + `, "capabilities": {"log": true}, "input": {"name": "vm"},
		"source": "export default async (input, ctx) => { await ctx.host.log.info('hi', {n: 1}); return {greeting: 'hello, ' + input.name}; }"}`)
	if err != nil {
		return "", err
	}
	if string(res.Value) != `{"greeting":"hello, vm"}` || len(res.Logs) != 1 || res.Logs[0].Message != "hi" {
		return "", fmt.Errorf("value %s, logs %+v", res.Value, res.Logs)
	}
	// Every layer applied (timing coarsening is off unless a profile asks),
	// the cgroup's beneath the service's own.
	var missing []string
	applied := 0
	jobCgroup := ""
	for _, l := range p.Layers {
		switch {
		case l.State == "applied":
			applied++
		case l.Name != "timing_mitigation":
			missing = append(missing, fmt.Sprintf("%s %s (%s)", l.Name, l.State, l.Detail))
		}
		if l.Name == "cgroup_memory" {
			jobCgroup = l.Detail
		}
	}
	if len(missing) > 0 {
		return "", fmt.Errorf("layers not applied: %s", strings.Join(missing, "; "))
	}
	if !strings.Contains(jobCgroup, "("+e.cgroup+"/pmjail-") {
		return "", fmt.Errorf("the job's memory cgroup (%s) is not beneath the service's %s", jobCgroup, e.cgroup)
	}
	left, err := jobCgroups(e.cgroup, false)
	if err != nil || len(left) > 0 {
		return "", fmt.Errorf("job cgroups left after the run: %v %v", left, err)
	}
	return fmt.Sprintf("value %s, log %q, %d layers applied, %s", res.Value, res.Logs[0].Message, applied, jobCgroup), nil
}

func (e *env) runRequired() (string, error) {
	res, p, err := e.runJob(`{"runtime": "deno", "limits": ` + tcgLimits + `, "mode": "required", "source": "console.log('contained')"}`)
	if err != nil {
		return "", err
	}
	if res.Stdout != "contained\n" || p.Mode != "required" || p.Decision != "run" {
		return "", fmt.Errorf("stdout %q, mode %q, decision %q", res.Stdout, p.Mode, p.Decision)
	}
	return fmt.Sprintf("stdout %q, mode %s, decision %s", res.Stdout, p.Mode, p.Decision), nil
}

func (e *env) refusePeers() (string, error) {
	outsider := peer{nobodyUID, nogroupGID}
	o, err := asPeer(outsider, "health")
	if err != nil {
		return "", err
	}
	if o.Errno != "EACCES" {
		return "", fmt.Errorf("%s, not in group %s: %+v, want EACCES at connect", outsider, groupName, o)
	}
	// Root passes the socket's mode and is the daemon's own uid, which the
	// daemon always lets in (server/API.md).
	root := peer{0, 0}
	if _, err := answer(root, "health"); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s: %s at connect; %s (the daemon's own uid): served", outsider, o.Errno, root), nil
}

func (e *env) reload() (string, error) {
	before := e.pid
	config, err := os.ReadFile(configPath)
	if err != nil {
		return "", err
	}
	changed := strings.Replace(string(config), `"max_queue": 8`, `"max_queue": 9`, 1)
	if changed == string(config) {
		return "", fmt.Errorf("%s has no \"max_queue\": 8 to change", configPath)
	}
	if err := writeFile(configPath, changed, 0o644); err != nil {
		return "", err
	}
	if _, err := systemctl("reload", serviceUnit); err != nil {
		return "", err
	}
	// The reload is a signal: wait until the daemon has taken the config.
	// The global max_queue is in the daemon's own uid's health only (a
	// member reads its share's).
	var health string
	err = poll(time.Minute, func() error {
		o, err := answer(peer{0, 0}, "health")
		if err != nil {
			return err
		}
		if o.Health.MaxQueue != 9 {
			return fmt.Errorf("%w: max_queue %d", errNotYet, o.Health.MaxQueue)
		}
		health = fmt.Sprintf("max_queue %d", o.Health.MaxQueue)
		return e.serving(o.Health.PID)
	})
	if err != nil {
		return "", err
	}
	if e.pid != before {
		return "", fmt.Errorf("the daemon was replaced (pid %d, then %d)", before, e.pid)
	}
	return fmt.Sprintf("%s after the reload, same pid %d", health, e.pid), nil
}

func (e *env) watchdog() (string, error) {
	// systemd stamps the watchdog when the service becomes ready: only a
	// later stamp is a ping (every 15 s, half of WatchdogSec).
	props, err := properties(serviceUnit, "WatchdogUSec", "WatchdogTimestampMonotonic")
	if err != nil {
		return "", err
	}
	ready := props["WatchdogTimestampMonotonic"]
	err = poll(time.Minute, func() error {
		if props, err = properties(serviceUnit, "WatchdogUSec", "WatchdogTimestampMonotonic"); err != nil {
			return err
		}
		if props["WatchdogTimestampMonotonic"] == ready {
			return fmt.Errorf("%w: no ping since the stamp at %s µs (WatchdogUSec %s)", errNotYet, ready, props["WatchdogUSec"])
		}
		return nil
	})
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("WatchdogUSec %s, a ping at %s µs after the stamp at %s µs", props["WatchdogUSec"], props["WatchdogTimestampMonotonic"], ready), nil
}

// inFlight starts a Deno job that sleeps for d as a member, waits until the
// daemon runs it, and returns where its outcome will arrive. The job has
// stdin, so that it runs cold, in a cgroup made for it: a warm runtime's
// was made ahead, under a prestarted name, which jobCgroups leaves out.
func (e *env) inFlight(d time.Duration) (<-chan *outcome, error) {
	job := fmt.Sprintf(`{"runtime": "deno", "limits": `+tcgLimits+`, "stdin": "cold",
		"source": "await new Promise((r) => setTimeout(r, %d)); console.log('slept')"}`, d.Milliseconds())
	done := make(chan *outcome, 1)
	go func() {
		o, err := asPeer(e.member(), "run", job)
		if err != nil {
			o = &outcome{Err: err.Error()}
		}
		done <- o
	}()
	err := poll(startupTime, func() error {
		o, err := answer(e.member(), "health")
		if err != nil {
			return err
		}
		if o.Health.InFlight == 0 {
			return fmt.Errorf("%w: nothing in flight", errNotYet)
		}
		return nil
	})
	return done, err
}

func (e *env) stopDrains() (string, error) {
	done, err := e.inFlight(3 * time.Second)
	if err != nil {
		return "", err
	}
	if _, err := systemctl("stop", serviceUnit); err != nil {
		return "", err
	}
	o := <-done
	if o.Err != "" || o.Result.Status != jail.StatusOK || o.Result.Stdout != "slept\n" {
		return "", fmt.Errorf("the job in flight at the stop: %+v", o)
	}
	if err := e.gone(); err != nil {
		return "", err
	}
	if err := wantState(socketUnit, "active"); err != nil {
		return "", err
	}
	return fmt.Sprintf("the job in flight finished (%q); %s inactive, its cgroup and processes gone; the socket still listens", o.Result.Stdout, serviceUnit), nil
}

// gone checks that the service is stopped and left nothing: no cgroup, no
// process of a daemon or job. What systemd tears down after the stop
// returns is given a while to go.
func (e *env) gone() error {
	if err := wantState(serviceUnit, "inactive"); err != nil {
		return err
	}
	return poll(30*time.Second, func() error {
		if _, err := os.Stat(e.cgroup); !os.IsNotExist(err) {
			left, _ := jobCgroups(e.cgroup, true)
			return fmt.Errorf("%w: %s is still there (job cgroups %v): %v", errNotYet, e.cgroup, left, err)
		}
		if left := processesNamed(jailProcesses...); len(left) > 0 {
			return fmt.Errorf("%w: processes left: %v", errNotYet, left)
		}
		return nil
	})
}

func (e *env) reactivate() (string, error) {
	before := e.pid
	o, err := answer(e.member(), "health")
	if err != nil {
		return "", err
	}
	if err := poll(time.Minute, func() error { return e.serving(o.Health.PID) }); err != nil {
		return "", err
	}
	if e.pid == before {
		return "", fmt.Errorf("the daemon still has the stopped one's pid %d", before)
	}
	return fmt.Sprintf("a new daemon, pid %d (was %d)", e.pid, before), nil
}

func (e *env) killRestart() (string, error) {
	done, err := e.inFlight(time.Minute)
	if err != nil {
		return "", err
	}
	// In flight is counted from the request: wait for the job's cgroup and
	// its runtime.
	var jobs []string
	err = poll(startupTime, func() error {
		if jobs, err = jobCgroups(e.cgroup, false); err != nil {
			return err
		}
		if len(jobs) != 1 {
			return fmt.Errorf("%w: job cgroups %v, want one", errNotYet, jobs)
		}
		for _, pid := range pidsNamed("deno") {
			if cg, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && strings.Contains(string(cg), "/"+jobs[0]) {
				return nil
			}
		}
		return fmt.Errorf("%w: no deno in %s yet", errNotYet, jobs[0])
	})
	if err != nil {
		return "", err
	}
	// Every runtime and init stage the daemon has (the job's, and the warm
	// runtimes waiting) must die with it; pidfds name exactly those.
	var pidfds []int
	defer func() {
		for _, fd := range pidfds {
			unix.Close(fd)
		}
	}()
	for _, pid := range pidsNamed("deno", "pmjail-init") {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			pidfds = append(pidfds, fd)
		}
	}
	killed := e.pid
	if err := syscall.Kill(killed, syscall.SIGKILL); err != nil {
		return "", err
	}
	if o := <-done; o.Err == "" {
		return "", fmt.Errorf("the job of a killed daemon answered: %+v", o.Result)
	}
	// Restart=on-failure, after RestartSec; the old instance's processes
	// are killed with it (KillMode=mixed) and its job's cgroup is removed.
	err = poll(startupTime, func() error {
		pid, err := mainPID()
		if err != nil {
			return err
		}
		if pid == 0 || pid == killed {
			return fmt.Errorf("%w: MainPID %d", errNotYet, pid)
		}
		o, err := answer(e.member(), "health")
		if err != nil {
			return err
		}
		return e.serving(o.Health.PID)
	})
	if err != nil {
		return "", err
	}
	props, err := properties(serviceUnit, "NRestarts")
	if err != nil {
		return "", err
	}
	if props["NRestarts"] != "1" {
		return "", fmt.Errorf("NRestarts %s, want 1", props["NRestarts"])
	}
	if _, err := os.Stat(filepath.Join(e.cgroup, jobs[0])); !os.IsNotExist(err) {
		return "", fmt.Errorf("the killed daemon's job cgroup %s is still there: %v", jobs[0], err)
	}
	// The killed daemon's processes, not every deno: the new daemon starts
	// warm runtimes of its own. A pidfd polls readable once its process
	// has exited.
	for _, fd := range pidfds {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if n, err := unix.Poll(fds, 0); err != nil || n == 0 {
			return "", fmt.Errorf("a runtime or init stage of the killed daemon still runs (pid %d; %v)", pidfdPid(fd), err)
		}
	}
	return fmt.Sprintf("pid %d killed; pid %d serves (NRestarts 1); job cgroup %s and its Deno gone", killed, e.pid, jobs[0]), nil
}

func (e *env) stopAll() (string, error) {
	if _, err := systemctl("stop", socketUnit, serviceUnit); err != nil {
		return "", err
	}
	if err := wantState(socketUnit, "inactive"); err != nil {
		return "", err
	}
	if _, err := os.Stat(socketPath); !os.IsNotExist(err) {
		return "", fmt.Errorf("%s is still there: %v", socketPath, err)
	}
	if err := e.gone(); err != nil {
		return "", err
	}
	return fmt.Sprintf("%s removed; no cgroup or process left", socketPath), nil
}

// purge removes the package while its socket listens: the prerm stops
// and disables the units, dpkg removes the files, the postrm removes the
// state and the config.
func (e *env) purge() (string, error) {
	if _, err := systemctl("start", socketUnit); err != nil {
		return "", err
	}
	// The check's own drop-in is not the package's to remove.
	if err := os.RemoveAll(dropInDir); err != nil {
		return "", err
	}
	if _, err := dpkg("--purge", packageName); err != nil {
		return "", err
	}
	if _, err := systemctl("daemon-reload"); err != nil {
		return "", err
	}
	for _, unit := range []string{socketUnit, serviceUnit} {
		props, err := properties(unit, "LoadState")
		if err != nil {
			return "", err
		}
		if props["LoadState"] != "not-found" {
			return "", fmt.Errorf("%s: LoadState %s after the purge, want not-found", unit, props["LoadState"])
		}
	}
	for _, path := range []string{
		socketPath, filepath.Join(binDir, "pmjail"), "/usr/lib/pmjail", filepath.Join(unitDir, serviceUnit),
		"/etc/systemd/system/sockets.target.wants/" + socketUnit, "/etc/pmjail", stateDir,
	} {
		if _, err := os.Lstat(path); !os.IsNotExist(err) {
			return "", fmt.Errorf("%s is still there after the purge: %v", path, err)
		}
	}
	if err := e.gone(); err != nil {
		return "", err
	}
	if _, err := lookupGroup(groupName); err != nil {
		return "", fmt.Errorf("the group should stay (files may carry its gid): %w", err)
	}
	return fmt.Sprintf("units not found, files, %s, /etc/pmjail and %s gone; group %s kept", socketPath, stateDir, groupName), nil
}

// dumpService prints what systemd and the daemon say, after a failure.
func (e *env) dumpService() {
	status, err := systemctl("status", "--no-pager", "--lines=0", serviceUnit, socketUnit)
	if err != nil {
		status = err.Error() // status exits non-zero for a stopped unit; its text is in the error
	}
	fmt.Printf("--- systemctl status\n%s\n", status)
	if log, err := os.ReadFile(serviceLog); err == nil {
		fmt.Printf("--- %s\n%s", serviceLog, log)
	}
}
