package main

import (
	"io"
	"os"
	"sync"
)

// stdout is where a run's output passes through to, and then its value:
// it remembers whether that output ended its last line, so that the value
// starts a line of its own.
var stdout = &lineWriter{w: os.Stdout, ended: true}

// lineWriter passes writes through and keeps whether the last byte written
// was a newline (or nothing was written).
type lineWriter struct {
	w     io.Writer
	mu    sync.Mutex
	ended bool
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	n, err := l.w.Write(p)
	if n > 0 {
		l.ended = p[n-1] == '\n'
	}
	return n, err
}

// line writes b as a line of its own, after a newline if the output so far
// did not end with one.
func (l *lineWriter) line(b []byte) {
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	if !ended {
		b = append([]byte{'\n'}, b...)
	}
	_, _ = l.Write(b)
}
