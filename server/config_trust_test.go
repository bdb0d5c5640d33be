package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConfigExampleParses: deploy/'s example config is what the systemd VM
// check installs; it must stay valid (its secret read from a test file).
func TestConfigExampleParses(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "deploy", "config.example.json"))
	if err != nil {
		t.Fatal(err)
	}
	secret := filepath.Join(t.TempDir(), "example-api")
	if err := os.WriteFile(secret, []byte("Bearer example\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The host has no pmjail group: the VM check creates it.
	cfg := strings.NewReplacer("/etc/pmjail/secrets/example-api", secret, `"pmjail"`, `"root"`).Replace(string(data))
	c, err := ParseConfig(strings.NewReader(cfg))
	if err != nil {
		t.Fatalf("deploy/config.example.json: %v", err)
	}
	if s := c.derived.ceil.Broker.Secrets["example-api"]; len(s.Origins) == 0 {
		t.Errorf("the example secret names no origins: %+v", s)
	}
	// Its tenant narrows the global ceiling: no network, no secrets.
	if len(c.derived.tenants) != 1 || c.derived.tenants[0].ceil.Broker.AllowRequest || len(c.derived.tenants[0].ceil.Broker.Secrets) != 0 {
		t.Errorf("the example tenant: %+v", c.derived.tenants)
	}
}

// TestConfigPrivateOrigins: private_origins reaches the broker's ceiling.
func TestConfigPrivateOrigins(t *testing.T) {
	c, err := ParseConfig(strings.NewReader(`{"version": 1, "ceiling": {"capabilities": {"request": {"origins": ["https://api.example.com"], "private_origins": ["http://127.0.0.1:8080"]}}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := c.derived.ceil.Broker.PrivateOrigins; len(got) != 1 || got[0] != "http://127.0.0.1:8080" {
		t.Errorf("private origins %v", got)
	}
}
