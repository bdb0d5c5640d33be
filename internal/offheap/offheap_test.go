package offheap

import "testing"

func TestAllocFree(t *testing.T) {
	for _, n := range []int{0, 1, 4096, 3 << 20} {
		b := Alloc(n)
		if len(b.B) != n {
			t.Fatalf("Alloc(%d): %d bytes", n, len(b.B))
		}
		for i := range b.B {
			if b.B[i] != 0 {
				t.Fatalf("Alloc(%d): byte %d is %d", n, i, b.B[i])
			}
			b.B[i] = 0xa5
		}
		b.Free()
		if b.B != nil {
			t.Fatal("a freed buffer still holds its bytes")
		}
		b.Free() // twice is harmless
	}
}
