package cgroup

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
)

// pidsDir is the job's directory of the pids controller, if it has one.
func (j *Group) pidsDir() (string, bool) {
	if j.v1 != nil {
		dir, ok := j.paths[Pids]
		return dir, ok
	}
	dir, ok := j.paths[UnifiedKey]
	return dir, ok && j.m.host.Has(Pids)
}

// TasksNow is how many tasks (threads) the job holds now (pids.current).
func (j *Group) TasksNow() (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	dir, ok := j.pidsDir()
	if j.deleted || !ok {
		return 0, fmt.Errorf("tasks of cgroup %s: no pids controller: %w", j.name, ErrNotSupported)
	}
	var r reader
	v, _ := r.single(filepath.Join(dir, "pids.current"), false)
	if r.err != nil {
		return 0, fmt.Errorf("tasks of cgroup %s: %w", j.name, r.err)
	}
	return v, nil
}

// SetTasksLimit sets the job's bound on tasks (pids.max) alone, as SetLimits
// would set it.
func (j *Group) SetTasksLimit(n int64) error {
	j.mu.Lock()
	defer j.mu.Unlock()
	dir, ok := j.pidsDir()
	if j.deleted || !ok {
		return fmt.Errorf("set tasks limit of cgroup %s: no pids controller: %w", j.name, ErrNotSupported)
	}
	if n <= 0 {
		return fmt.Errorf("set tasks limit of cgroup %s: %d tasks", j.name, n)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatInt(n, 10)), 0); err != nil {
		return fmt.Errorf("set tasks limit of cgroup %s: %w", j.name, err)
	}
	return nil
}
