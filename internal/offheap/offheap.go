// Package offheap gives byte buffers outside the Go heap, for the daemon's
// large per-run buffers whose end it knows (captured output before it is
// joined, a response body before it is encoded). Their memory goes back to
// the kernel the moment they are freed, not when the collector and then
// the scavenger get to it, so the garbage of one buffer does not add to
// the peak of the next. Where buffers cannot be mapped, Alloc falls back to
// the heap.
package offheap

// Buffer is a byte slice from Alloc; Free gives it back, after which
// nothing may use it.
type Buffer struct {
	B      []byte // len n, filled with zeros
	mapped bool
}

// Alloc returns a buffer of n bytes. Its pages cost nothing until written.
func Alloc(n int) Buffer {
	if n > 0 {
		if b, err := mapBytes(n); err == nil {
			return Buffer{B: b, mapped: true}
		}
	}
	return Buffer{B: make([]byte, n)}
}

// Free gives the buffer back; a heap buffer is left to the collector.
func (b *Buffer) Free() {
	if b.mapped {
		unmapBytes(b.B[:cap(b.B)])
	}
	*b = Buffer{}
}
