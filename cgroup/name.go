package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// Job cgroups are named "pmjail-<owner pid>-<id>" so that Sweep can tell the
// orphans of a dead supervisor from the jobs of a live one.
const namePrefix = "pmjail-"

// leafName is the v2 leaf the supervisor's processes move into so that
// their cgroup may enable controllers for its children (the no internal
// process rule). It has no owner pid, so Sweep never takes it for a job.
const leafName = "pmjail-supervisor"

const maxIDLen = 64

// reservePrefix starts the id of a cgroup reserved for an init stage
// started ahead of its job (Manager.Reserve).
const reservePrefix = "prestart-"

// Reserved reports whether a cgroup name is one Manager.Reserve made.
func Reserved(name string) bool {
	_, id, ok := parseName(name)
	return ok && strings.HasPrefix(id, reservePrefix)
}

// jobName returns the cgroup name for job id owned by pid.
func jobName(pid int, id string) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	return namePrefix + strconv.Itoa(pid) + "-" + id, nil
}

// validID accepts ids that are a single harmless path component.
func validID(id string) error {
	if id == "" || len(id) > maxIDLen {
		return fmt.Errorf("cgroup job id %q: want 1..%d characters", id, maxIDLen)
	}
	if id[0] == '.' {
		return fmt.Errorf("cgroup job id %q: must not start with a dot", id)
	}
	for _, r := range id {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' ||
			r == '-' || r == '_' || r == '.'
		if !ok {
			return fmt.Errorf("cgroup job id %q: only letters, digits, '-', '_' and '.' are allowed", id)
		}
	}
	return nil
}

// ownerPID returns the supervisor pid encoded in a job cgroup name.
func ownerPID(name string) (int, bool) {
	pid, _, ok := parseName(name)
	return pid, ok
}

// parseName splits a job cgroup name, as jobName makes it, into its owner
// pid and job id.
func parseName(name string) (pid int, id string, ok bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return 0, "", false
	}
	num, id, ok := strings.Cut(rest, "-")
	if !ok || id == "" || num == "" || num[0] == '0' {
		return 0, "", false
	}
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return 0, "", false
	}
	return pid, id, true
}
