package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// The metrics listener's bounds. Anyone who can reach it may connect
// (on 127.0.0.1, every local user), and a scrape needs one connection:
// a few are room enough, and none may hold its fd for long.
const (
	metricsMaxConns = 8
	// metricsMaxConnsPerPeer is one peer's part of them: a local uid's
	// over loopback, a remote address's beyond, so that one peer that
	// holds its connections open (each for up to the timeouts below)
	// leaves the scraper room.
	metricsMaxConnsPerPeer = 2
	metricsReadTimeout     = 10 * time.Second
	metricsWriteTimeout    = 10 * time.Second
	metricsIdleTimeout     = 30 * time.Second
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

// connCap bounds a listener's open connections: at most max in all and
// perUID from one peer (peerOf). A connection over a bound is closed as
// it is accepted: it never holds an fd, a buffer or a goroutine of the
// server. Accepting does not block, so a peer under its bound is served
// however full another's is.
type connCap struct {
	net.Listener
	max, perUID int
	unix        bool
	log         *slog.Logger
	refused     func()

	mu    sync.Mutex
	open  int
	byUID map[string]int
	// warned is when a refusal was last logged: an attack refuses
	// thousands, the log says so once a minute.
	warned atomic.Int64
}

// noCredsPeer keys the Unix peers whose credentials could not be read:
// one peer of their own.
const noCredsPeer = "uid:none"

func newConnCap(ln net.Listener, max, perUID int, log *slog.Logger, refused func()) *connCap {
	_, unix := ln.(*net.UnixListener)
	return &connCap{Listener: ln, max: max, perUID: perUID, unix: unix, log: log, refused: refused, byUID: map[string]int{}}
}

func (l *connCap) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		var p *Peer
		key := noCredsPeer
		if l.unix {
			if p = readPeer(c); p.Err == nil {
				key = uidPeer(p.UID)
			}
		} else {
			key = tcpPeer(c)
		}
		if l.take(key) {
			return &cappedConn{Conn: c, peer: p, release: func() { l.give(key) }}, nil
		}
		c.Close()
		if l.refused != nil {
			l.refused()
		}
		if now := time.Now().Unix(); now-l.warned.Load() >= 60 {
			l.warned.Store(now)
			l.log.Warn("connection refused: too many open", "listen", l.Addr().String(), "peer", key,
				"max_connections", l.max, "max_connections_per_peer", l.perUID)
		}
	}
}

// uidPeer is the key of a peer by its uid.
func uidPeer(uid uint32) string { return "uid:" + strconv.FormatUint(uint64(uid), 10) }

// tcpPeer is the key of a TCP connection's peer: the local uid that
// connected, for a connection from this host, where every local user
// shares its addresses (and may take any of 127/8, and connect from
// each of the host's own addresses, the source of a connection to one
// of them), else the remote address. The kernel is asked for every
// peer: it knows the socket of a peer on this host, and no other. A
// loopback peer whose uid it cannot tell is a peer of its own, counted
// in all only: it must not share a part with the scraper.
func tcpPeer(c net.Conn) string {
	local, lok := c.LocalAddr().(*net.TCPAddr)
	remote, rok := c.RemoteAddr().(*net.TCPAddr)
	if !lok || !rok {
		return "conn:" + c.RemoteAddr().String()
	}
	if uid, err := tcpPeerUID(local, remote); err == nil {
		return uidPeer(uid)
	}
	if !remote.IP.IsLoopback() {
		return "ip:" + remote.IP.String()
	}
	return "conn:" + remote.String()
}

func (l *connCap) take(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.open >= l.max || (l.perUID > 0 && l.byUID[key] >= l.perUID) {
		return false
	}
	l.open++
	l.byUID[key]++
	return true
}

func (l *connCap) give(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open--
	if l.byUID[key]--; l.byUID[key] <= 0 {
		delete(l.byUID, key)
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
