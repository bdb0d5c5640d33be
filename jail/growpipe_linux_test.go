package jail

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestGrowPipe: a channel's pipe is grown to channelPipeSize,
// and stays usable in Go's poller (growPipe must not take the fd out of
// non-blocking mode, as os.File.Fd would).
func TestGrowPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	growPipe(w)
	rc, err := w.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var size, flags int
	var ctlErr error
	if err := rc.Control(func(fd uintptr) {
		size, ctlErr = unix.FcntlInt(fd, unix.F_GETPIPE_SZ, 0)
		if ctlErr == nil {
			flags, ctlErr = unix.FcntlInt(fd, unix.F_GETFL, 0)
		}
	}); err != nil || ctlErr != nil {
		t.Fatal(err, ctlErr)
	}
	if size != channelPipeSize {
		t.Errorf("pipe size %d, want %d", size, channelPipeSize)
	}
	if flags&unix.O_NONBLOCK == 0 {
		t.Errorf("the pipe left non-blocking mode")
	}
	// A megabyte goes in without a reader.
	_ = w.SetWriteDeadline(time.Now().Add(5 * time.Second))
	if n, err := w.Write(make([]byte, channelPipeSize)); err != nil || n != channelPipeSize {
		t.Errorf("wrote %d, %v; want the whole %d at once", n, err, channelPipeSize)
	}
}
