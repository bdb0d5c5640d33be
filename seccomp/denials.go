package seccomp

import (
	"maps"
	"sync"
)

// Denials counts denied syscalls by name. It is safe for concurrent use:
// Serve writes while a caller may read.
type Denials struct {
	mu        sync.Mutex
	counts    map[string]uint64
	total     uint64
	saturated bool
}

// add counts one denial and returns how many there were in all.
func (d *Denials) add(name string) uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.counts == nil {
		d.counts = map[string]uint64{}
	}
	d.counts[name]++
	d.total++
	return d.total
}

func (d *Denials) saturate() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.saturated = true
}

// Saturated reports whether Serve spent NotifyBudget and stopped counting:
// the counts are then lower bounds, and the calls denied after them failed
// with ENOSYS unnamed.
func (d *Denials) Saturated() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.saturated
}

// Counts returns a copy of the counts: syscall name -> times denied.
func (d *Denials) Counts() map[string]uint64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return maps.Clone(d.counts)
}
