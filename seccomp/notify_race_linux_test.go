package seccomp

import (
	"context"
	"testing"

	"golang.org/x/sys/unix"
)

// TestServeWakeNeverOutlivesItsFD: Serve's wake-up on ctx's end must never
// write after Serve closed its eventfd, or the 8 bytes land in whatever
// file took the number next — in a daemon, another job's pipe or control
// socket. The listener here is a pipe whose writer is closed (a hang-up, as
// when the job's last task exits) at the same moment ctx ends; right after
// Serve returns, a new pipe takes the freed numbers and must stay empty.
func TestServeWakeNeverOutlivesItsFD(t *testing.T) {
	for i := 0; i < 3000; i++ {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() {
			defer close(done)
			var d Denials
			_ = d.Serve(ctx, p[0], unix.EPERM) // closes p[0]
		}()
		unix.Close(p[1])
		cancel()
		<-done
		var q [2]int
		if err := unix.Pipe2(q[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			t.Fatal(err)
		}
		var q2 [2]int // a second pair, so the writer end takes the number too
		if err := unix.Pipe2(q2[:], unix.O_CLOEXEC|unix.O_NONBLOCK); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 16)
		for _, r := range []int{q[0], q2[0]} {
			if n, _ := unix.Read(r, buf); n > 0 {
				t.Fatalf("iteration %d: a new pipe received %q from a closed wake-up fd", i, buf[:n])
			}
		}
		for _, fd := range []int{q[0], q[1], q2[0], q2[1]} {
			unix.Close(fd)
		}
	}
}
