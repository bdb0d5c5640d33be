package jail

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapChunk maps n bytes of private anonymous memory, outside the Go heap:
// the kernel gives pages as they are written and takes them back at once
// on unmapChunk.
func mapChunk(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map output chunk: %w", err)
	}
	return b, nil
}

// unmapChunk unmaps a chunk from mapChunk; nothing may use it after.
func unmapChunk(b []byte) {
	_ = unix.Munmap(b[:cap(b)])
}
