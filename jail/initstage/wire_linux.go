package initstage

import (
	"encoding"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// SendMessage writes one encoded message (a Config's, a Join's or a
// Report's MarshalBinary) to the control socket fd, with fds as SCM_RIGHTS
// on its first byte.
func SendMessage(fd int, msg []byte, fds []int) error {
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	for len(msg) > 0 {
		n, err := unix.SendmsgN(fd, msg, rights, nil, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return os.NewSyscallError("sendmsg", err)
		}
		// A stream socket may take less when a signal interrupts it; the
		// rights went with the first byte. Nothing is written once all went:
		// even an empty write fails when the peer has already exited.
		msg, rights = msg[n:], nil
	}
	return nil
}

// ReadReport reads one report from the control socket fd, and the
// descriptors sent with it, and nothing beyond it (a failed exec's second
// report may follow). io.EOF means the peer closed the socket first. On
// an error no descriptor is kept.
func ReadReport(fd int) (Report, []int, error) {
	var report Report
	fds, err := receive(fd, &report, maxReportSize, maxReportFDs)
	if err != nil {
		return Report{}, nil, err
	}
	return report, fds, nil
}

// receive reads one message of at most limit bytes from the control
// socket fd into m, and up to maxFDs descriptors sent with it. On an error
// it keeps no descriptor.
func receive(fd int, m encoding.BinaryUnmarshaler, limit, maxFDs int) ([]int, error) {
	r := newRightsReader(fd, maxFDs)
	msg, err := readMessage(r, limit)
	if err == nil {
		err = m.UnmarshalBinary(msg)
	}
	if err != nil {
		for _, fd := range r.fds {
			unix.Close(fd)
		}
		return nil, err
	}
	return r.fds, nil
}

// maxReportFDs bounds the descriptors a report may carry (it names at most
// three: the channel's two ends and the seccomp listener).
const maxReportFDs = 4

// rightsReader reads the control socket and keeps the descriptors that
// arrive with the data (a join carries the job's cgroup task files, a
// report the guest channel and the seccomp listener), up to max; any
// beyond are closed.
type rightsReader struct {
	fd  int
	max int
	fds []int
	oob []byte
}

func newRightsReader(fd, max int) *rightsReader {
	return &rightsReader{fd: fd, max: max, oob: make([]byte, unix.CmsgSpace(4*max))}
}

func (r *rightsReader) Read(p []byte) (int, error) {
	for {
		n, oobn, _, _, err := unix.Recvmsg(r.fd, p, r.oob, unix.MSG_CMSG_CLOEXEC)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return 0, os.NewSyscallError("recvmsg", err)
		}
		if oobn > 0 {
			r.keep(r.oob[:oobn])
		}
		if n == 0 && len(p) > 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (r *rightsReader) keep(oob []byte) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if len(r.fds) < r.max {
				r.fds = append(r.fds, fd)
			} else {
				unix.Close(fd)
			}
		}
	}
}
