package jail

import (
	"errors"
	"net"
	"os"
	"time"
)

// fifoConn is the host end of the guest channel: the read side of the
// guest's outgoing FIFO and the write side of its incoming one, as a
// net.Conn so that the broker's deadlines apply.
type fifoConn struct {
	r, w *os.File
}

func (c *fifoConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *fifoConn) Write(p []byte) (int, error) { return c.w.Write(p) }

func (c *fifoConn) Close() error {
	return errors.Join(c.r.Close(), c.w.Close())
}

func (c *fifoConn) SetDeadline(t time.Time) error {
	return errors.Join(c.r.SetReadDeadline(t), c.w.SetWriteDeadline(t))
}
func (c *fifoConn) SetReadDeadline(t time.Time) error  { return c.r.SetReadDeadline(t) }
func (c *fifoConn) SetWriteDeadline(t time.Time) error { return c.w.SetWriteDeadline(t) }

func (c *fifoConn) LocalAddr() net.Addr  { return fifoAddr("host") }
func (c *fifoConn) RemoteAddr() net.Addr { return fifoAddr("guest") }

type fifoAddr string

func (a fifoAddr) Network() string { return "fifo" }
func (a fifoAddr) String() string  { return string(a) }
