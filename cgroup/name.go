package cgroup

import (
	"fmt"
	"strconv"
	"strings"
)

// Job cgroups are named "pmjail-<owner pid>-@<owner start>-<id>" so that
// Sweep can tell the orphans of a dead supervisor from the jobs of a live
// one: the start time (owner) tells the supervisor from a later process
// given its pid. Names without it, "pmjail-<owner pid>-<id>", are earlier
// versions'; no id holds '@'.
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

// jobName returns the cgroup name for job id owned by o.
func jobName(o owner, id string) (string, error) {
	if err := validID(id); err != nil {
		return "", err
	}
	if o.start == "" {
		return namePrefix + strconv.Itoa(o.pid) + "-" + id, nil
	}
	return namePrefix + strconv.Itoa(o.pid) + "-@" + o.start + "-" + id, nil
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

// ownerOf returns the supervisor a job cgroup's name says owns it.
func ownerOf(name string) (owner, bool) {
	o, _, ok := parseName(name)
	return o, ok
}

// parseName splits a job cgroup name, as jobName makes it (or an earlier
// version did, without the start), into its owner and job id.
func parseName(name string) (o owner, id string, ok bool) {
	rest, ok := strings.CutPrefix(name, namePrefix)
	if !ok {
		return owner{}, "", false
	}
	num, id, ok := strings.Cut(rest, "-")
	if !ok || !decimal(num) {
		return owner{}, "", false
	}
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return owner{}, "", false
	}
	o.pid = pid
	if after, ok := strings.CutPrefix(id, "@"); ok {
		o.start, id, ok = strings.Cut(after, "-")
		if !ok || !decimal(o.start) {
			return owner{}, "", false
		}
	}
	if id == "" {
		return owner{}, "", false
	}
	return o, id, true
}

// decimal reports whether s is a number as the kernel writes one: digits,
// without a leading zero.
func decimal(s string) bool {
	if s == "" || s[0] == '0' && len(s) > 1 {
		return false
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
