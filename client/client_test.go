package client

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestDecodeError(t *testing.T) {
	e := decodeError(400, []byte(`{"error":{"code":"invalid_job","message":"limits.memory: too much","field":"limits.memory"}}`), 0)
	if e.Code != "invalid_job" || e.Field != "limits.memory" || e.StatusCode != 400 {
		t.Errorf("%+v", e)
	}
	e = decodeError(502, []byte("<html>bad gateway</html>"), 3*time.Second)
	if e.Code != "http_502" || !strings.Contains(e.Error(), "retry after 3s") {
		t.Errorf("%+v: %v", e, e)
	}
}

func TestClientReportsDialErrors(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "none.sock")
	c := New(sock)
	defer c.Close()
	_, err := c.Health(context.Background())
	var apiErr *Error
	if err == nil || errors.As(err, &apiErr) {
		t.Errorf("no daemon: %v, want a dial error", err)
	}
	want := "no connection to the daemon at " + sock + ": no such file or directory (is pmjail serve running"
	if !errors.Is(err, syscall.ENOENT) || !strings.Contains(err.Error(), want) {
		t.Errorf("no daemon: %q, want ENOENT and %q", err, want)
	}
}
