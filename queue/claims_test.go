package queue

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// provisionShipped makes the stream and the buckets on the shipped
// server at url, as its workers' user.
func provisionShipped(ctx context.Context, t *testing.T, url string) {
	t.Helper()
	cfg := Config{URLs: []string{url}, User: "worker", Password: "worker-pw", Concurrency: 1}
	if err := cfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, cfg, Layout{Replicas: 1, MaxJobs: 100}); err != nil {
		t.Fatal(err)
	}
}

// A tenant cannot wipe the others' claims. Its user may publish on its
// own keys' subjects of the claims bucket, with any headers: a
// Nats-Rollup: all there purged the bucket's stream, every tenant's
// claims, so that bob's job sent again was stored twice and another job
// under bob's id was no longer refused at once.
func TestTenantCannotRollUpOthersClaims(t *testing.T) {
	url := startShippedNATS(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	provisionShipped(ctx, t, url)
	bob := dialAs(t, url, "bob")
	const id = "build-7"
	if err := bob.Submit(ctx, "bob", id, &api.Job{Runtime: "deno", Source: "bob's"}); err != nil {
		t.Fatal(err)
	}

	nc := connectAs(t, url, "ci")
	for _, rollup := range []string{"all", "sub"} {
		m := &nats.Msg{Subject: "$KV." + DefaultClaims + ".ci.x", Header: nats.Header{"Nats-Rollup": []string{rollup}}, Data: []byte("x")}
		_, _ = nc.RequestMsg(m, 2*time.Second)
	}
	if _, err := bob.claims.get(ctx, Key("bob", id)); err != nil {
		t.Fatalf("bob's claim after ci's roll-up: %v", err)
	}
	if err := bob.Submit(ctx, "bob", id, &api.Job{Runtime: "deno", Source: "another"}); !errors.Is(err, ErrIDConflict) {
		t.Errorf("another job under bob's id after ci's roll-up: %v", err)
	}
}

// What a tenant may ask of the buckets names no other tenant's keys: a
// bucket's stream info, which binding a jetstream.KeyValue asks for,
// lists every key of the bucket when asked with a subjects filter, and
// a tenant was allowed it (every tenant's job ids).
func TestTenantListsNoOthersClaims(t *testing.T) {
	url := startShippedNATS(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	provisionShipped(ctx, t, url)
	bob := dialAs(t, url, "bob")
	const id = "secret-build-9"
	if err := bob.Submit(ctx, "bob", id, &api.Job{Runtime: "deno", Source: "bob's"}); err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(connectAs(t, url, "worker", nats.CustomInboxPrefix("_INBOX")))
	if err != nil {
		t.Fatal(err)
	}
	results, err := js.KeyValue(ctx, DefaultBucket)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := results.Put(ctx, Key("bob", id), []byte(`{"status":"ok"}`)); err != nil {
		t.Fatal(err)
	}
	nc := connectAs(t, url, "ci")
	for _, bucket := range []string{DefaultClaims, DefaultBucket} {
		m, err := nc.Request("$JS.API.STREAM.INFO.KV_"+bucket, []byte(`{"subjects_filter":">"}`), 2*time.Second)
		if err == nil && strings.Contains(string(m.Data), id) {
			t.Errorf("ci listed bob's job id in %s: %s", bucket, m.Data)
		}
	}
}

// A claim a tenant wrote by hand, not as a client writes one, is an
// error that says so: neither a conflict nor a job keyed by what it holds.
func TestHandMadeClaimIsAnError(t *testing.T) {
	url := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	provisionShipped(ctx, t, url)
	ci := dialAs(t, url, "ci")
	job := &api.Job{Runtime: "deno", Source: "ci's"}
	data, _ := json.Marshal(job)
	sum := digest(data)
	for i, v := range []string{
		"x", " ", "x ", " x", "0 0", sum + " ", sum + " a.b", sum + " *", sum + " >", sum + " \x00",
		sum + " " + strings.Repeat("a", 150), strings.ToUpper(sum) + " 0123456789abcdef01234567",
	} {
		id := "hand-" + string(rune('a'+i))
		if _, err := ci.js.Publish(ctx, "$KV."+DefaultClaims+"."+Key("ci", id), []byte(v)); err != nil {
			t.Fatalf("%q: %v", v, err)
		}
		sctx, scancel := context.WithTimeout(ctx, 10*time.Second)
		err := ci.Submit(sctx, "ci", id, job)
		scancel()
		if err == nil || errors.Is(err, ErrIDConflict) || !strings.Contains(err.Error(), "not one a client made") {
			t.Errorf("claim %q: %v", v, err)
		}
	}
}

// A claims bucket any tenant can empty, made by `nats kv add` alone, is
// a worker's warning (a client may not read a stream's config); a
// bucket missing is a submit's error, and a wait's, naming its key.
func TestClaimsBucketChecked(t *testing.T) {
	url := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	provisionShipped(ctx, t, url)
	js, err := jetstream.New(connectAs(t, url, "worker", nats.CustomInboxPrefix("_INBOX")))
	if err != nil {
		t.Fatal(err)
	}
	s, err := js.Stream(ctx, "KV_"+DefaultClaims)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.CachedInfo().Config
	sc.AllowRollup = true
	if _, err := js.UpdateStream(ctx, sc); err != nil {
		t.Fatal(err)
	}
	workerCfg := Config{URLs: []string{url}, User: "worker", Password: "worker-pw", Concurrency: 1}
	if err := workerCfg.Check(1); err != nil {
		t.Fatal(err)
	}
	var logs logBuf
	w, err := NewWorker(ctx, &workerCfg, admitAll{&echo{}}, slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	w.Stop(time.Second)
	if !strings.Contains(logs.String(), "the claims bucket allows roll-ups") {
		t.Errorf("a worker on a claims bucket that allows roll-ups said nothing: %s", logs.String())
	}

	ci := dialAs(t, url, "ci")
	for _, bucket := range []string{DefaultClaims, DefaultBucket} {
		if err := js.DeleteKeyValue(ctx, bucket); err != nil {
			t.Fatal(err)
		}
		_, err := ci.SubmitWait(ctx, "ci", NewID(), &api.Job{Runtime: "deno", Source: "1"})
		field := map[string]string{DefaultClaims: "claims", DefaultBucket: "bucket"}[bucket]
		if !errors.Is(err, ErrNoBucket) || !strings.HasPrefix(err.Error(), "queue.nats."+field+": "+bucket+": ") {
			t.Errorf("no bucket %s: %v", bucket, err)
		}
		if bucket == DefaultClaims {
			if err := Provision(ctx, workerCfg, Layout{Replicas: 1, MaxJobs: 100}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// A careless client's submit, under the shipped permissions, that names
// a tenant, a claims bucket or a results bucket its user may not use
// ends in the server's refusal, not a bare timeout, and a wait for a
// result it may not read ends at once, not when its context does.
func TestRefusedSubmitSaysSo(t *testing.T) {
	url := startShippedNATS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	provisionShipped(ctx, t, url)
	job := &api.Job{Runtime: "deno", Source: "1"}
	for _, tc := range []struct {
		tenant         string
		bucket, claims string
	}{{tenant: "others"}, {tenant: "ci", claims: "nope"}, {tenant: "ci", bucket: "wrong"}} {
		c, err := Dial(ctx, Config{URLs: []string{url}, User: "ci", Password: "ci-pw", InboxPrefix: "_INBOX_ci", Bucket: tc.bucket, Claims: tc.claims})
		if err != nil {
			t.Fatal(err)
		}
		wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
		_, err = c.SubmitWait(wctx, tc.tenant, NewID(), job)
		if !errors.Is(err, nats.ErrPermissionViolation) || wctx.Err() != nil {
			t.Errorf("%+v: %v", tc, err)
		}
		wcancel()
		c.Close()
	}
}
