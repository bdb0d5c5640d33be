package queue

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// A tenant cannot make another's job a duplicate the stream drops. The
// stream's duplicate check keys a message by whatever Nats-Msg-Id its
// publisher gives, on any subject: ci, publishing first on its own
// subject with the message id bob's client would give, made bob's job
// under that id vanish for the stream's duplicate window (its submit
// waited for a result no worker would store), and ci cannot claim bob's
// id in the claims bucket either. Under the shipped permissions.
func TestForgedMsgIDBlocksNoOne(t *testing.T) {
	url := startShippedNATS(t, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	workerCfg := Config{URLs: []string{url}, User: "worker", Password: "worker-pw", Concurrency: 1}
	if err := workerCfg.Check(1); err != nil {
		t.Fatal(err)
	}
	if err := Provision(ctx, workerCfg, Layout{Replicas: 1, MaxJobs: 100}); err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(ctx, &workerCfg, admitAll{&echo{}}, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	w.Start()
	defer w.Stop(time.Second)

	// bob's id is one ci can guess, such as a build number.
	const id = "build-42"
	js, err := jetstream.New(connectAs(t, url, "ci"))
	if err != nil {
		t.Fatal(err)
	}
	forged := &nats.Msg{Subject: DefaultSubject + ".ci", Header: nats.Header{HeaderID: []string{id}}, Data: []byte(`{"runtime":"deno","source":"ci's"}`)}
	if _, err := js.PublishMsg(ctx, forged, jetstream.WithMsgID(Key("bob", id))); err != nil {
		t.Fatalf("ci's own subject: %v", err)
	}
	short, scancel := context.WithTimeout(ctx, 2*time.Second)
	if claims, err := js.KeyValue(short, DefaultClaims); err == nil {
		if _, err := claims.Create(short, Key("bob", id), []byte("0 0")); err == nil {
			t.Errorf("ci claimed bob's job id")
		}
	}
	scancel()

	bob, err := Dial(ctx, Config{URLs: []string{url}, User: "bob", Password: "bob-pw", InboxPrefix: "_INBOX_bob"})
	if err != nil {
		t.Fatal(err)
	}
	defer bob.Close()
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	res, err := bob.SubmitWait(wctx, "bob", id, &api.Job{Runtime: "deno", Source: "bob's"})
	if err != nil || res.Stdout != "bob's" {
		t.Fatalf("bob's job under an id ci used first: %+v %v", res, err)
	}
	// bob's own job sent again is still one job, and another under the
	// id a conflict.
	if err := bob.Submit(ctx, "bob", id, &api.Job{Runtime: "deno", Source: "bob's"}); err != nil {
		t.Errorf("bob's job sent again: %v", err)
	}
	if err := bob.Submit(ctx, "bob", id, &api.Job{Runtime: "deno", Source: "another"}); err == nil {
		t.Errorf("another job under bob's id: no conflict")
	}
}
