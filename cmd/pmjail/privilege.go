package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/pmjail/pmjail/jail"
)

// capability is one of linux/capability.h's, by bit number and name.
type capability struct {
	bit  uint
	name string
}

// errPrivilege marks a process that lacks what building a jail needs.
var errPrivilege = errors.New("needs root")

// neededCaps are the capabilities a supervisor uses, each for what it
// needs it: without any of them a run fails in set-up, as an internal
// error about uid_map or a missing namespace. Their bit numbers are
// those of linux/capability.h.
var neededCaps = []capability{
	{1, "CAP_DAC_OVERRIDE"}, // open the init stage's /proc/PID/uid_map
	{6, "CAP_SETGID"},       // gid_map over the job's host ids
	{7, "CAP_SETUID"},       // uid_map over the job's host ids
	{21, "CAP_SYS_ADMIN"},   // write the maps; the namespaces' set-up
}

// checkPrivilege says, before a run is tried, what this process lacks to
// build a jail: root (the job's ids are leased under jail.LeaseDir, which
// is root's, and mapped to host ids of their own range, which needs the
// capabilities above in the host's user namespace), or, as root, the
// capabilities a container or a unit's CapabilityBoundingSet took away.
// A daemon needs none of them of its clients: `pmjail submit` is the way
// in for other users.
func checkPrivilege() error {
	if uid := os.Geteuid(); uid != 0 {
		return fmt.Errorf("%w (running as uid %d): a job's ids are leased under %s, which is root's, and mapped to host ids of its own, which takes %s; run it as root, or send the job to a daemon with pmjail submit",
			errPrivilege, uid, jail.LeaseDir, capNames(neededCaps))
	}
	missing, err := missingCaps()
	if err != nil {
		return nil // no verdict: the run says what fails
	}
	if len(missing) > 0 {
		return fmt.Errorf("%w with %s, which this process lacks (a container's or a unit's capability bounding set?): a jail's ids and namespaces cannot be set up without them",
			errPrivilege, strings.Join(missing, ", "))
	}
	return nil
}

// missingCaps names the needed capabilities absent from this process's
// effective set.
func missingCaps() ([]string, error) {
	eff, err := effectiveCaps()
	if err != nil {
		return nil, err
	}
	var missing []string
	for _, c := range neededCaps {
		if eff&(1<<c.bit) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing, nil
}

// effectiveCaps is this process's effective capability set: one capget,
// as the posture reads it, where /proc/self/status would be a file to
// open and parse on every run.
func effectiveCaps() (uint64, error) {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return 0, os.NewSyscallError("capget", err)
	}
	return uint64(data[1].Effective)<<32 | uint64(data[0].Effective), nil
}

func capNames(caps []capability) string {
	names := make([]string, len(caps))
	for i, c := range caps {
		names[i] = c.name
	}
	return strings.Join(names, ", ")
}
