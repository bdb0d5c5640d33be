package cgroup

import (
	"fmt"
	"path/filepath"
)

// MemoryNow is the memory the job's tasks hold now (memory.current on v2,
// memory.usage_in_bytes on v1): what a warm runtime waiting in it costs,
// and what a run that takes one must not be below.
func (j *Group) MemoryNow() (uint64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.deleted {
		return 0, fmt.Errorf("memory of cgroup %s: deleted", j.name)
	}
	var path string
	if dir, ok := j.paths[UnifiedKey]; ok {
		path = filepath.Join(dir, "memory.current")
	} else if dir, ok := j.paths[Memory]; ok {
		path = filepath.Join(dir, "memory.usage_in_bytes")
	} else {
		return 0, fmt.Errorf("memory of cgroup %s: no memory controller: %w", j.name, ErrNotSupported)
	}
	var r reader
	v, _ := r.single(path, false)
	if r.err != nil {
		return 0, fmt.Errorf("memory of cgroup %s: %w", j.name, r.err)
	}
	return v, nil
}
