package server

import (
	"fmt"
	"log/slog"
)

// Level is the config's log level.
func (c *Config) Level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return l, fmt.Errorf("log_level: %q (want debug, info, warn or error)", c.LogLevel)
	}
	return l, nil
}
