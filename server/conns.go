package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The metrics listener's bounds. Anyone who can reach it may connect
// (on 127.0.0.1, every local user), and a scrape needs one connection:
// a few are room enough, and none may hold its fd for long.
const (
	metricsMaxConns     = 8
	metricsReadTimeout  = 10 * time.Second
	metricsWriteTimeout = 10 * time.Second
	metricsIdleTimeout  = 30 * time.Second
)

// runFDReserve is the file descriptors a run is admitted with at least
// free: its lease, its control socket, its output pipes, its pidfd and
// cgroup, with room to spare. Below it the run is refused (503 busy)
// rather than left to fail half-way as pmjail's own error.
const runFDReserve = 64

// errNoFDs is fdRoom's refusal: the process is near its RLIMIT_NOFILE.
var errNoFDs = errors.New("too few free file descriptors")

// defaultConnCaps derives the socket's connection caps from the
// process's fd limit: a quarter of it for connections in all (the rest
// is the runs'), at most 1024 (each idle connection also holds buffers
// and a goroutine), and a quarter of that for one uid, so that one local
// user cannot take every connection.
func defaultConnCaps() (total, perUID int) {
	total = min(max(nofile()/4, 16), 1024)
	return total, max(total/4, 4)
}

// nofile is the process's soft RLIMIT_NOFILE (Go raises it to the hard
// limit at start).
func nofile() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur > math.MaxInt32 {
		return math.MaxInt32
	}
	return int(rl.Cur)
}

// fdRoom reports errNoFDs when fewer than want file descriptors are
// free under the soft RLIMIT_NOFILE.
func fdRoom(want int) error {
	limit := nofile()
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) {
			return fmt.Errorf("%w: %w", errNoFDs, err)
		}
		return nil // no /proc: nothing to tell by
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return nil
	}
	if free := limit - len(names); free < want {
		return fmt.Errorf("%w: %d of %d open", errNoFDs, len(names), limit)
	}
	return nil
}

// connCap bounds a listener's open connections: at most max in all and,
// on a Unix socket, perUID from one uid (SO_PEERCRED, read at accept; a
// peer whose credentials cannot be read counts as one uid of its own).
// A connection over a bound is closed as it is accepted: it never holds
// an fd, a buffer or a goroutine of the server. Accepting does not block,
// so a peer under its bound is served however full another's is.
type connCap struct {
	net.Listener
	max, perUID int
	unix        bool
	log         *slog.Logger
	refused     func()

	mu    sync.Mutex
	open  int
	byUID map[uint32]int
	// warned is when a refusal was last logged: an attack refuses
	// thousands, the log says so once a minute.
	warned atomic.Int64
}

// noCredsUID keys the peers whose credentials could not be read (-1 is
// no uid).
const noCredsUID = math.MaxUint32

func newConnCap(ln net.Listener, max, perUID int, log *slog.Logger, refused func()) *connCap {
	_, unix := ln.(*net.UnixListener)
	return &connCap{Listener: ln, max: max, perUID: perUID, unix: unix, log: log, refused: refused, byUID: map[uint32]int{}}
}

func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var p *Peer
		uid := uint32(noCredsUID)
		if l.unix {
			if p = readPeer(c); p.Err == nil {
				uid = p.UID
			}
		}
		if l.take(uid) {
			return &cappedConn{Conn: c, peer: p, release: func() { l.give(uid) }}, nil
		}
		c.Close()
		if l.refused != nil {
			l.refused()
		}
		if now := time.Now().Unix(); now-l.warned.Load() >= 60 {
			l.warned.Store(now)
			l.log.Warn("connection refused: too many open", "listen", l.Addr().String(), "peer_uid", int64(uid),
				"max_connections", l.max, "max_connections_per_uid", l.perUID)
		}
	}
}

func (l *connCap) take(uid uint32) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max || (l.unix && l.perUID > 0 && l.byUID[uid] >= l.perUID) {
		return false
	}
	l.open++
	if l.unix {
		l.byUID[uid]++
	}
	return true
}

func (l *connCap) give(uid uint32) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.unix {
		if l.byUID[uid]--; l.byUID[uid] <= 0 {
			delete(l.byUID, uid)
		}
	}
}

// cappedConn gives its place back when closed, once.
type cappedConn struct {
	net.Conn
	peer    *Peer
	once    sync.Once
	release func()
}

func (c *cappedConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(c.release)
	return err
}

// CloseWrite keeps what net/http does for a plain connection (a
// half-close before closing after an error).
func (c *cappedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// cappedConnContext records the peer read at accept, or reads it.
func cappedConnContext(ctx context.Context, c net.Conn) context.Context {
	if cc, ok := c.(*cappedConn); ok {
		if cc.peer != nil {
			return context.WithValue(ctx, peerKey{}, cc.peer)
		}
		c = cc.Conn
	}
	return connContext(ctx, c)
}

// connRefused counts a connection closed at accept.
func (s *Server) connRefused() { s.metrics.rejected.WithLabelValues(codeBusy).Inc() }

// capSocket bounds the socket's connections as the config says, and
// warns when the bounds leave the runs too few file descriptors.
func (s *Server) capSocket(ln net.Listener) net.Listener {
	sc := s.Config().Socket
	limit := nofile()
	s.log.Info("connection caps", "max_connections", sc.MaxConns, "max_connections_per_uid", sc.MaxConnsPerUID, "nofile", limit)
	if sc.MaxConns > limit/2 {
		s.log.Warn("socket.max_connections is over half the daemon's RLIMIT_NOFILE: idle connections can leave runs without file descriptors",
			"max_connections", sc.MaxConns, "nofile", limit)
	}
	return newConnCap(ln, sc.MaxConns, sc.MaxConnsPerUID, s.log, s.connRefused)
}
