package seccomp

import (
	"maps"
	"sync"
)

// Denials counts denied syscalls by name. It is safe for concurrent use:
// Serve writes while a caller may read.
type Denials struct {
	mu     sync.Mutex
	counts map[string]uint64
}

func (d *Denials) add(name string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]uint64{}
	}
	d.counts[name]++
}

// Counts returns a copy of the counts: syscall name -> times denied.
func (d *Denials) Counts() map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.counts)
}
