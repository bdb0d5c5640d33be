package queue

import (
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
)

// HeaderID is the header a job's id travels in.
const HeaderID = "Pmjail-Job-Id"

// connect dials the config's servers with its credentials. It keeps
// trying to reach a server for ever, and to reach another when one goes
// away: a worker outlives the restart of a NATS node.
func connect(c *Config, name string, opts ...nats.Option) (*nats.Conn, error) {
	o := []nats.Option{
		nats.Name(name),
		nats.CustomInboxPrefix(c.InboxPrefix),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.ReconnectJitter(100*time.Millisecond, time.Second),
	}
	switch {
	case c.Credentials != "":
		o = append(o, nats.UserCredentials(c.Credentials))
	case c.Nkey != "":
		opt, err := nats.NkeyOptionFromSeed(c.Nkey)
		if err != nil {
			return nil, fmt.Errorf("queue.nats.nkey: %w", err)
		}
		o = append(o, opt)
	case c.User != "":
		pw := c.Password
		if c.PasswordFile != "" {
			b, err := os.ReadFile(c.PasswordFile)
			if err != nil {
				return nil, fmt.Errorf("queue.nats.password_file: %w", err)
			}
			pw = strings.TrimRight(string(b), "\r\n")
		}
		o = append(o, nats.UserInfo(c.User, pw))
	}
	nc, err := nats.Connect(strings.Join(c.URLs, ","), append(o, opts...)...)
	if err != nil {
		return nil, &connectError{urls: strings.Join(c.URLs, ","), err: err}
	}
	return nc, nil
}

// connectError is a connection that reached no server: the caller names
// where the URLs came from (the worker's queue.nats.urls, a submit's
// --nats).
type connectError struct {
	urls string
	err  error
}

func (e *connectError) Error() string { return "connect to NATS " + e.urls + ": " + e.err.Error() }
func (e *connectError) Unwrap() error { return e.err }

// Key is the bucket's key of a tenant's job: the tenant is part of it,
// so that NATS permissions can give each tenant its own results alone
// ($KV.<bucket>.<tenant>.>), and one tenant's id never meets another's.
func Key(tenant, id string) string { return tenant + "." + id }
