package cgroup

import (
	"errors"
	"os"
	"sync"

	"github.com/pmjail/pmjail/internal/kfile"
)

// owner is the supervisor process a job cgroup's name says made it: its
// pid and its start time (kfile.Start), "" in a name of an earlier
// version. The pid alone is not the process: once the supervisor died,
// the kernel may give its pid to any process, and its orphans would then
// pass for a live supervisor's jobs for as long as that one lives.
type owner struct {
	pid   int
	start string
}

// self is this process as an owner; its start is "" if /proc could not
// say it, and its names are then an earlier version's, which Sweep keeps
// while any process has the pid.
var self = sync.OnceValue(func() owner {
	o := owner{pid: os.Getpid()}
	if _, start, err := kfile.Start(o.pid); err == nil {
		o.start = start
	}
	return o
})

// alive reports whether o still runs: a process has its pid and, when
// the name says it, its start time. A zombie counts (its supervisor has
// not been reaped, so its jobs are not yet orphans), and so does a pid
// whose start cannot be read but which exists: only a process seen to be
// another one, or none, makes o's jobs orphans.
func (o owner) alive() bool {
	if o.start == "" {
		return pidAlive(o.pid)
	}
	_, start, err := kfile.Start(o.pid)
	switch {
	case err == nil:
		return start == o.start
	case errors.Is(err, os.ErrNotExist):
		return false
	}
	return pidAlive(o.pid)
}
