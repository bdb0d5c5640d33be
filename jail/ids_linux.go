package jail

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"

	"golang.org/x/sys/unix"
)

// Ids inside the job's user namespace: the init stage runs as root there
// (mapped to an unprivileged host id) and the guest as guestID.
const (
	nsRootID = 0
	guestID  = 1000
)

// Host ids for jobs come from a range no ordinary account uses. Each
// concurrent job leases a slot: its user namespace's root maps to
// idBase+2*slot and the guest to idBase+2*slot+1, so no two live jobs share
// a host id, whichever supervisor process started them.
const (
	idBase  = 1 << 30
	idSlots = 1 << 14
)

// idLease holds a slot for as long as its abstract socket is bound: the
// kernel releases it when the supervisor exits, however it dies, and it
// leaves no file behind.
type idLease struct {
	fd   int
	slot int
}

func (l *idLease) rootID() int  { return idBase + 2*l.slot }
func (l *idLease) guestID() int { return idBase + 2*l.slot + 1 }

func (l *idLease) release() {
	if l.fd >= 0 {
		unix.Close(l.fd)
		l.fd = -1
	}
}

func leaseIDs() (*idLease, error) {
	start := rand.IntN(idSlots)
	for i := range idSlots {
		slot := (start + i) % idSlots
		fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, os.NewSyscallError("socket", err)
		}
		err = unix.Bind(fd, &unix.SockaddrUnix{Name: fmt.Sprintf("@pmjail/ids/%d", slot)})
		if err == nil {
			return &idLease{fd: fd, slot: slot}, nil
		}
		unix.Close(fd)
		if !errors.Is(err, unix.EADDRINUSE) {
			return nil, os.NewSyscallError("bind id lease", err)
		}
	}
	return nil, errors.New("no free job id slot")
}
