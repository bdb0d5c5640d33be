package server

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/coreos/go-systemd/v22/activation"
)

// Listen returns the daemon's socket: the one systemd passed (socket
// activation, whose owner and mode the .socket unit sets), or a new one at
// sc.Path with sc's owner, group and mode. activated says which.
func Listen(sc SocketConfig) (ln *net.UnixListener, activated bool, err error) {
	lns, err := activation.Listeners()
	if err != nil {
		return nil, false, fmt.Errorf("systemd socket activation: %w", err)
	}
	for _, l := range lns {
		if ul, ok := l.(*net.UnixListener); ok && ln == nil {
			ln = ul
			continue
		}
		if l != nil {
			l.Close()
		}
	}
	if ln != nil {
		return ln, true, nil
	}
	if len(lns) > 0 {
		return nil, false, errors.New("systemd socket activation: no Unix stream socket among the passed ones")
	}
	ln, err = listenPath(sc)
	return ln, false, err
}

func listenPath(sc SocketConfig) (*net.UnixListener, error) {
	mode, err := sc.FileMode()
	if err != nil {
		return nil, err
	}
	uid, gid, err := sc.Owners()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Dir(sc.Path), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if err := removeStale(sc.Path); err != nil {
		return nil, err
	}
	// Bind with every permission masked so that no peer can connect
	// before the owner and mode are right. The umask is process-wide: the
	// daemon binds its socket before it starts any job or background
	// build (internal/daemon), and the init stage sets its own (a jail
	// cloned in this window once had a root its guest could not pass).
	old := syscall.Umask(0o777)
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sc.Path, Net: "unix"})
	syscall.Umask(old)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", sc.Path, err)
	}
	if uid != -1 || gid != -1 {
		if err := os.Lchown(sc.Path, uid, gid); err != nil {
			ln.Close()
			return nil, fmt.Errorf("socket owner: %w", err)
		}
	}
	if err := os.Chmod(sc.Path, mode); err != nil {
		ln.Close()
		return nil, fmt.Errorf("socket mode: %w", err)
	}
	return ln, nil
}

// removeStale removes a socket file nobody listens on (a crashed daemon's);
// a live daemon's socket, or anything that is not a socket, is an error.
func removeStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("socket %s: %w", path, err)
	}
	if fi.Mode()&os.ModeSocket == 0 {
		return fmt.Errorf("socket %s: exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, time.Second)
	if err == nil {
		c.Close()
		return fmt.Errorf("socket %s: another daemon is listening on it", path)
	}
	if err := os.Remove(path); err != nil {
		return fmt.Errorf("remove stale socket: %w", err)
	}
	return nil
}
