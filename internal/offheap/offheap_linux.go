package offheap

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// mapBytes maps n bytes of private anonymous memory: the kernel gives pages
// as they are first written and takes them all back at munmap.
func mapBytes(n int) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("map %d bytes: %w", n, err)
	}
	return b, nil
}

// unmapBytes unmaps a slice mapBytes returned, whole.
func unmapBytes(b []byte) { _ = unix.Munmap(b) }
