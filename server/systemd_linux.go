package server

import (
	"context"
	"log/slog"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// The sd_notify states the daemon sends. Outside systemd ($NOTIFY_SOCKET
// unset) they are no-ops.
const (
	NotifyReady     = daemon.SdNotifyReady
	NotifyStopping  = daemon.SdNotifyStopping
	NotifyReloading = daemon.SdNotifyReloading
)

// Notify sends one state to systemd, logging a failure.
func Notify(log *slog.Logger, state string) {
	if _, err := daemon.SdNotify(false, state); err != nil {
		log.Warn("sd_notify", "state", state, "err", err)
	}
}

// Watchdog pings systemd's watchdog at half the interval of WATCHDOG_USEC
// while the server answers its own health check, until ctx ends. Without a
// watchdog it returns at once.
func (s *Server) Watchdog(ctx context.Context) {
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		s.log.Warn("systemd watchdog", "err", err)
		return
	}
	if interval <= 0 {
		return
	}
	s.log.Info("systemd watchdog on", "interval", interval)
	t := time.NewTicker(interval / 2)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			// A wedged limiter (the lock every run takes) must show as a
			// missed ping, so the check takes it.
			s.lim.stats()
			if _, err := daemon.SdNotify(false, daemon.SdNotifyWatchdog); err != nil {
				s.log.Warn("sd_notify watchdog", "err", err)
			}
		}
	}
}
