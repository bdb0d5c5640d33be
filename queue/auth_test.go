package queue

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// TestConnectAuthenticates: the config's nkey and user with a password
// file reach a server that requires them; a wrong one does not.
func TestConnectAuthenticates(t *testing.T) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := kp.PublicKey()
	seed, _ := kp.Seed()
	other, _ := nkeys.CreateUser()
	otherSeed, _ := other.Seed()
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, NoSigs: true, NoLog: true,
		Nkeys: []*server.NkeyUser{{Nkey: pub}},
		Users: []*server.User{{Username: "worker", Password: "pw"}}})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats server not ready")
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	url := ns.ClientURL()
	for _, tc := range []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"nkey", Config{URLs: []string{url}, Nkey: write("seed", seed)}, true},
		{"another nkey", Config{URLs: []string{url}, Nkey: write("other", otherSeed)}, false},
		{"password file", Config{URLs: []string{url}, User: "worker", PasswordFile: write("pw", []byte("pw\n"))}, true},
		{"wrong password", Config{URLs: []string{url}, User: "worker", Password: "nope"}, false},
		{"anonymous", Config{URLs: []string{url}}, false},
	} {
		if err := tc.cfg.Check(1); err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		nc, err := connect(&tc.cfg, "test")
		if (err == nil) != tc.ok {
			t.Errorf("%s: connect: %v, want success %v", tc.name, err, tc.ok)
		}
		if err == nil {
			nc.Close()
		}
	}
}
