package queue

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// A tenant makes no consumer of the result bucket, and its waits need
// none. A push consumer's deliver subject is any subject of the account,
// not one its maker may publish on, and the server delivers: ci's
// consumer of its own results (which the shipped permissions let it make,
// for its waits, as many durable ones as it liked) delivered them onto
// bob's result subject, where whatever listens for bob's results heard
// ci's, forged, as bob's.
func TestTenantDeliversNothingOntoAnotherSubject(t *testing.T) {
	url, _ := startShippedWorker(t, &echo{}, nil, "bob")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ci := dialAs(t, url, "ci")
	// ci's own job, and its result, still work.
	res, err := ci.Run(ctx, "ci", &api.Job{Runtime: "deno", Source: "forged"})
	if err != nil || res.Stdout != "forged" {
		t.Fatalf("ci's own job: %+v %v", res, err)
	}
	if got, err := ci.Get(ctx, "ci", res.ID); err != nil || got.Stdout != "forged" {
		t.Fatalf("ci's own result: %+v %v", got, err)
	}

	// Bob listens for the result of its job build-1.
	bob := connectAs(t, url, "bob")
	target := DefaultResultSubject + "." + Key("bob", "build-1")
	heard, err := bob.SubscribeSync(target)
	if err != nil {
		t.Fatal(err)
	}
	if err := bob.Flush(); err != nil {
		t.Fatal(err)
	}
	nc := connectAs(t, url, "ci")
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	sctx, scancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = js.CreatePushConsumer(sctx, "KV_"+DefaultBucket, jetstream.ConsumerConfig{
		Durable: "ci-onto-bob", DeliverSubject: target,
		FilterSubject: "$KV." + DefaultBucket + ".ci.>", AckPolicy: jetstream.AckNonePolicy})
	scancel()
	if err == nil {
		t.Errorf("ci made a consumer of its results delivering onto %s", target)
		// What it did: bob heard ci's result as its own.
		if m, err := heard.NextMsg(10 * time.Second); err == nil {
			t.Errorf("bob heard on %s: %.120s", target, m.Data)
		}
	}
}
