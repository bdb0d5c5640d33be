// Command unitcheck installs pmjail's Debian package (make deb) with dpkg,
// configures it as docs/daemon.md says and drives it through a real
// systemd: it runs as a service of the VM that integration/vm/run.sh -s
// boots with the host's systemd as PID 1 on a cgroup v2 kernel. It checks
// what the package and the unit files promise and no other test can show:
// the package's group, socket activation by a member of that group,
// Type=notify, a job's cgroup under the service's delegated subtree, mode
// required under the unit's own hardening, a peer the socket refuses,
// reload, the watchdog, a stop that drains a running job, a restart after
// the daemon is killed that leaves none of its jobs behind, the socket's
// removal, and a purge of the package that leaves nothing of it.
//
// It prints one PASS or FAIL line per check, in order, and stops at the
// first failure (each check builds on the last), printing the service's
// log; it exits 1 if any failed. Run by `make test-systemd`:
//
//	make deb
//	go build -o bin/vm/unitcheck ./integration/vm/unitcheck
//	deb=$(ls bin/deb/pmjail_*_amd64.deb)
//	integration/vm/run.sh -s -p "$deb" bin/vm/unitcheck -deb "/packages/${deb##*/}"
//
// It changes the system it runs on (packages, /etc, units): run it
// only in a throwaway VM. It refuses to run where systemd is not PID 1 or
// the hostname is not the VM's.
package main
