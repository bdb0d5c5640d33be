package queue

import (
	"context"
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
	url, _ := startShippedWorker(t, &echo{}, nil, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

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
	if _, err := js.Publish(short, "$KV."+DefaultClaims+"."+Key("bob", id), []byte("0 0")); err == nil {
		t.Errorf("ci claimed bob's job id")
	}
	scancel()

	bob := dialAs(t, url, "bob")
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
