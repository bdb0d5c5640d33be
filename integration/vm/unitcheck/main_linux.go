package main

import (
	"flag"
	"fmt"
	"os"
	"strings"
	"time"
)

// vmHostname is the name run.sh -s gives the VM: the check refuses to
// install anything on a machine that does not carry it.
const vmHostname = "pmjail-vm"

// check is one step; each assumes the ones before it passed.
type check struct {
	name string
	run  func(*env) (detail string, err error)
}

var checks = []check{
	{"dpkg -i the package, configure as docs/daemon.md says, enable the socket", (*env).install},
	{"the socket is systemd's; the service waits for a client", (*env).socketOnly},
	{"a pmjail group member's request starts the service (Type=notify)", (*env).activate},
	{"a Deno handler runs in a job cgroup under the delegated subtree", (*env).runHandler},
	{"mode required runs under the unit's hardening", (*env).runRequired},
	{"a peer outside the socket's group is refused", (*env).refusePeers},
	{"systemctl reload keeps the daemon serving", (*env).reload},
	{"the watchdog is fed", (*env).watchdog},
	{"systemctl stop drains a running job and leaves nothing", (*env).stopDrains},
	{"the next request starts the service again", (*env).reactivate},
	{"a killed daemon is restarted and its job is gone", (*env).killRestart},
	{"stopping the socket removes it and everything else", (*env).stopAll},
	{"dpkg --purge stops the socket and removes what the package made", (*env).purge},
}

func main() {
	if len(os.Args) > 1 && os.Args[1] == roleClient {
		os.Exit(runClient(os.Args[2:]))
	}
	e := &env{}
	flag.StringVar(&e.deb, "deb", "", "the Debian package `FILE` that make deb built")
	flag.Parse()
	if e.deb == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: unitcheck -deb FILE")
		os.Exit(2)
	}
	if err := refuseOutsideVM(); err != nil {
		fmt.Fprintf(os.Stderr, "unitcheck: %v\n", err)
		os.Exit(2)
	}
	for i, c := range checks {
		start := time.Now()
		detail, err := c.run(e)
		took := time.Since(start).Round(time.Millisecond)
		if err != nil {
			fmt.Printf("FAIL %s (%s): %v\n", c.name, took, err)
			e.dumpService()
			fmt.Printf("unitcheck: %d of %d checks passed; the rest not run\n", i, len(checks))
			os.Exit(1)
		}
		fmt.Printf("PASS %s (%s): %s\n", c.name, took, detail)
	}
	fmt.Printf("unitcheck: all %d checks passed\n", len(checks))
}

// refuseOutsideVM keeps the check, which installs files and starts units,
// off any machine but run.sh's VM.
func refuseOutsideVM() error {
	comm, err := os.ReadFile("/proc/1/comm")
	if err != nil || strings.TrimSpace(string(comm)) != "systemd" {
		return fmt.Errorf("PID 1 is not systemd (%q): run me in integration/vm/run.sh -s", strings.TrimSpace(string(comm)))
	}
	if name, _ := os.Hostname(); name != vmHostname {
		return fmt.Errorf("hostname %q is not the VM's %q: this check changes the system it runs on", name, vmHostname)
	}
	return nil
}
