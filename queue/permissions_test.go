package queue

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// tenantsSeen is an echo that records the tenants it ran jobs for.
type tenantsSeen struct {
	echo
	mu      sync.Mutex
	tenants []string
}

func (e *tenantsSeen) Execute(ctx context.Context, tenant string, body []byte) (*api.Result, error) {
	e.mu.Lock()
	e.tenants = append(e.tenants, tenant)
	e.mu.Unlock()
	return e.echo.Execute(ctx, tenant, body)
}

// logBuf is a log's text, written by many goroutines.
type logBuf struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (b *logBuf) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuf) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startShippedNATS starts a server from deploy/queue/nats-server.conf, its
// password hashes replaced by plain test passwords and its cluster left
// out: the permissions under test are the ones shipped. Each of tenants
// is a user as ci is, its password its name + "-pw".
func startShippedNATS(t *testing.T, tenants ...string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "deploy", "queue", "nats-server.conf"))
	if err != nil {
		t.Fatal(err)
	}
	conf := strings.NewReplacer(
		"$2a$11$REPLACE_WITH_BCRYPT_HASH_OF_THE_WORKERS_PASSWORD", "worker-pw",
		"$2a$11$REPLACE_WITH_BCRYPT_HASH_OF_CIS_PASSWORD", "ci-pw",
	).Replace(string(data))
	if len(tenants) > 0 {
		// ci's user, its permissions and all, once more for each.
		start := strings.Index(conf, "      {\n        user: ci\n")
		if start < 0 {
			t.Fatal("deploy/queue/nats-server.conf: no user ci")
		}
		n := strings.Index(conf[start:], "\n      }\n")
		if n < 0 {
			t.Fatal("deploy/queue/nats-server.conf: user ci has no end")
		}
		end := start + n + len("\n      }\n")
		ci := conf[start:end]
		var more strings.Builder
		for _, name := range tenants {
			more.WriteString(strings.NewReplacer("user: ci", "user: "+name, "ci-pw", name+"-pw", ".ci", "."+name, "_ci", "_"+name).Replace(ci))
		}
		conf = conf[:end] + more.String() + conf[end:]
	}
	path := filepath.Join(t.TempDir(), "nats-server.conf")
	if err := os.WriteFile(path, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("deploy/queue/nats-server.conf: %v", err)
	}
	opts.Host, opts.Port = "127.0.0.1", -1
	opts.HTTPHost, opts.HTTPPort = "", 0
	opts.Cluster, opts.Routes = server.ClusterOpts{}, nil
	opts.StoreDir = t.TempDir()
	opts.JetStreamMaxStore = 1 << 30
	opts.NoSigs, opts.NoLog = true, true
	return serveNATS(t, opts)
}

// startShippedWorker starts a server as startShippedNATS does, provisions
// it as the workers' user and starts a worker of e with log (nil for
// none), stopped when t ends; it returns the server's URL and the worker.
func startShippedWorker(t *testing.T, e runner, log *slog.Logger, tenants ...string) (string, *Worker) {
	t.Helper()
	url := startShippedNATS(t, tenants...)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Config{URLs: []string{url}, User: "worker", Password: "worker-pw", Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100}); err != nil {
		t.Fatalf("provision as the workers' user: %v", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	w, err := NewWorker(ctx, &cfg, admitAll{e}, log)
	if err != nil {
		t.Fatalf("worker as the workers' user: %v", err)
	}
	w.Start()
	t.Cleanup(func() { w.Stop(time.Second) })
	return url, w
}

// dialAs is a Client of the shipped server at url as tenant, closed when
// t ends.
func dialAs(t *testing.T, url, tenant string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, Config{URLs: []string{url}, User: tenant, Password: tenant + "-pw", InboxPrefix: "_INBOX_" + tenant})
	if err != nil {
		t.Fatalf("dial as %s: %v", tenant, err)
	}
	t.Cleanup(c.Close)
	return c
}

// connectAs connects to the shipped server at url as tenant (its
// password tenant-pw, its inbox _INBOX_tenant), closed when t ends.
func connectAs(t *testing.T, url, tenant string, opts ...nats.Option) *nats.Conn {
	t.Helper()
	opts = append([]nats.Option{nats.UserInfo(tenant, tenant+"-pw"), nats.CustomInboxPrefix("_INBOX_" + tenant)}, opts...)
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		t.Fatalf("connect as %s: %v", tenant, err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// TestTenantPermissions attacks the shipped permissions as tenant ci:
// submitting as another tenant, reading another tenant's result, and
// listening on the workers' replies and other tenants' results all fail,
// while ci's own job runs and its result reaches it.
func TestTenantPermissions(t *testing.T) {
	e := &tenantsSeen{}
	logs := &logBuf{}
	url, w := startShippedWorker(t, e, slog.New(slog.NewTextHandler(logs, nil)))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ci := dialAs(t, url, "ci")
	res, err := ci.Run(ctx, "ci", &api.Job{Runtime: "deno", Source: "own"})
	if err != nil || res.Stdout != "own" {
		t.Fatalf("ci's own job: %+v %v", res, err)
	}
	if got, err := ci.Get(ctx, "ci", res.ID); err != nil || got.Stdout != "own" {
		t.Errorf("ci's own result: %+v %v", got, err)
	}
	// The worker watches the stream's notices of jobs (it looked for
	// them before its first pull).
	if l := logs.String(); strings.Contains(l, "notice") {
		t.Errorf("the worker under the shipped permissions: %s", l)
	}

	// Another tenant's result, stored by a worker.
	if _, err := w.kv.Create(ctx, Key("other", "secret"), []byte(`{"id":"secret","status":"ok","stdout":"secret"}`)); err != nil {
		t.Fatal(err)
	}
	short := func() (context.Context, context.CancelFunc) { return context.WithTimeout(ctx, 2*time.Second) }

	sctx, scancel := short()
	err = ci.Submit(sctx, "other", "forged", &api.Job{Runtime: "deno", Source: "forged"})
	scancel()
	if err == nil {
		t.Errorf("ci submitted a job as tenant other")
	}
	sctx, scancel = short()
	if got, err := ci.Get(sctx, "other", "secret"); err == nil {
		t.Errorf("ci read other's result: %+v", got)
	}
	scancel()
	sctx, scancel = short()
	if got, err := ci.Wait(sctx, "other", "secret"); err == nil {
		t.Errorf("ci watched other's result: %+v", got)
	}
	scancel()

	// Raw subscriptions on others' replies and results are refused by
	// the server.
	violations := make(chan string, 8)
	nc := connectAs(t, url, "ci", nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { violations <- err.Error() }))
	for _, subj := range []string{"_INBOX.>", "pmjail.results.>", "$KV.pmjail_results.>", NoticeSubject(DefaultSubject) + ".*"} {
		if _, err := nc.SubscribeSync(subj); err != nil {
			continue // refused at once
		}
		select {
		case v := <-violations:
			if !strings.Contains(strings.ToLower(v), "permissions violation") {
				t.Errorf("subscribe %s: %s, want a permissions violation", subj, v)
			}
		case <-time.After(5 * time.Second):
			t.Errorf("subscribe %s as ci: no permissions violation", subj)
		}
	}
	// A direct read of the stream's messages, past the key filter.
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// A job published on another tenant's subject, past the claim that
	// Submit makes first (which ci's permissions refuse too).
	sctx, scancel = short()
	if _, err := js.Publish(sctx, DefaultSubject+".other", []byte(`{"runtime":"deno","source":"raw"}`)); err == nil {
		t.Errorf("ci published a job on tenant other's subject")
	}
	scancel()
	sctx, scancel = short()
	if s, err := js.Stream(sctx, "KV_"+DefaultBucket); err == nil {
		if m, err := s.GetLastMsgForSubject(sctx, "$KV."+DefaultBucket+".other.secret"); err == nil {
			t.Errorf("ci read other's result from the stream: %s", m.Data)
		}
	}
	scancel()

	e.mu.Lock()
	defer e.mu.Unlock()
	for _, tn := range e.tenants {
		if tn != "ci" {
			t.Errorf("the worker ran a job for tenant %q submitted by ci", tn)
		}
	}
}

// The shipped permissions let a worker retire the consumer of older
// workers: it watches their in-progress acks on $JS.ACK.
func TestWorkerRetiresUnderShippedPermissions(t *testing.T) {
	url := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := Config{URLs: []string{url}, User: "worker", Password: "worker-pw", Concurrency: 1, AckWait: api.Duration(time.Second)}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100}); err != nil {
		t.Fatal(err)
	}
	c, err := Dial(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ci := dialAs(t, url, "ci")
	older := olderConsumer(t, c, cfg)
	if err := ci.Submit(ctx, "ci", "sent-back", &api.Job{Runtime: "deno", Source: "back"}); err != nil {
		t.Fatal(err)
	}
	if err := fetchOne(t, older).Nak(); err != nil {
		t.Fatal(err)
	}
	startWorker(t, cfg, &echo{})
	res, err := ci.Wait(ctx, "ci", "sent-back")
	if err != nil || res.Stdout != "back" {
		t.Fatalf("the job an older worker sent back: %+v %v", res, err)
	}
	if _, err := c.js.Consumer(ctx, cfg.Stream, cfg.Consumer); !errors.Is(err, jetstream.ErrConsumerNotFound) {
		t.Errorf("the older consumer: %v, want it deleted", err)
	}
}
