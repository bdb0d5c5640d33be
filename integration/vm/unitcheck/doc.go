// Command unitcheck installs pmjail as deploy/ says and drives it through a
// real systemd: it runs as a service of the VM that integration/vm/run.sh -s
// boots with the host's systemd as PID 1 on a cgroup v2 kernel. It checks
// what the unit files promise and no other test can show: socket
// activation by a member of the pmjail group, Type=notify, a job's cgroup
// under the service's delegated subtree, mode required under the unit's
// own hardening, a peer the socket refuses, reload, the
// watchdog, a stop that drains a running job, a restart after the daemon
// is killed that leaves none of its jobs behind, and the socket's removal.
//
// It prints one PASS or FAIL line per check, in order, and stops at the
// first failure (each check builds on the last), printing the service's
// log; it exits 1 if any failed. Built in `make test-vm`:
//
//	go build -o bin/vm/unitcheck ./integration/vm/unitcheck
//	integration/vm/run.sh -s -d "$PWD/bin/vm:$PWD/bin/vm" \
//	  -d "$PWD/node_modules/@deno:/usr/local/lib/pmjail/node_modules/@deno" \
//	  bin/vm/unitcheck -bin "$PWD/bin/vm" -deploy "$PWD/deploy"
//
// It changes the system it runs on (/usr/local/bin, /etc, units): run it
// only in a throwaway VM. It refuses to run where systemd is not PID 1 or
// the hostname is not the VM's.
package main
