package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Layout is what Provision makes: the stream's and the bucket's
// replicas and bounds, the operator's choices of capacity and retention.
type Layout struct {
	Replicas int
	// MaxJobs bounds the jobs waiting in the stream: beyond it a submit
	// is refused (back-pressure at the door, not in the workers).
	MaxJobs int64
	// MaxJobsPerTenant bounds the jobs of one tenant's subject waiting
	// in the stream: beyond it that tenant's submit is refused, not
	// every tenant's, so one tenant's backlog does not fill the stream
	// (default a quarter of MaxJobs, or DefaultMaxJobsPerTenant without
	// MaxJobs; -1 for no bound).
	MaxJobsPerTenant int64
	// Retention is how long a result stays in the bucket.
	Retention time.Duration
	// MaxResultBytes bounds the bucket's bytes (0: only the account's
	// storage does): once full, its oldest results make room for new
	// ones, whoever's (BucketDiscardOld).
	MaxResultBytes int64
	// Duplicates is the stream's window for a job id sent twice, and how
	// long a claim of a job id lasts (default DefaultDuplicates).
	Duplicates time.Duration
	// History is how many values of a key the bucket keeps (default 1):
	// a result is stored once, so more shows a second store.
	History uint8
}

// DefaultDuplicates is the stream's duplicate window when the layout
// names none, as JetStream's own default.
const DefaultDuplicates = 2 * time.Minute

// claimBytes bounds the claims bucket. A claim is a digest and a nonce;
// once full, the oldest claims make room (DiscardOld): a tenant that
// claims ids at NATS's pace shortens how long the others' claims last,
// which only lets a job sent twice be stored twice (its worker then
// finds its result), never refuses one.
const claimBytes = 64 << 20

// claimSize bounds one claim's value: a tenant writes its own.
const claimSize = 256

// DefaultMaxJobsPerTenant is Layout.MaxJobsPerTenant of a stream whose
// jobs in all are not bounded.
const DefaultMaxJobsPerTenant = 10000

// perTenant is the layout's bound of one tenant's waiting jobs, 0 for none.
func (l Layout) perTenant() int64 {
	switch {
	case l.MaxJobsPerTenant < 0:
		return 0
	case l.MaxJobsPerTenant > 0:
		return l.MaxJobsPerTenant
	case l.MaxJobs > 0:
		return max(1, l.MaxJobs/4)
	}
	return DefaultMaxJobsPerTenant
}

// Provision makes (or updates) the work-queue stream, the result bucket
// and the claims bucket the config names, as an operator's `nats stream
// add` and `nats kv add` would: for tests, benchmarks and a first
// set-up. The stream republishes the headers of each job it stores on
// NoticeSubject + "." + the tenant, which wakes the workers; it refuses
// a tenant's job past the layout's bound of one tenant's waiting jobs,
// which leaves the others room.
func Provision(ctx context.Context, cfg Config, l Layout) error {
	if err := cfg.Check(1); err != nil {
		return err
	}
	nc, err := connect(&cfg, "pmjail provision")
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return fmt.Errorf("jetstream: %w", err)
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:       cfg.Stream,
		Subjects:   []string{cfg.Subject + ".*"},
		Retention:  jetstream.WorkQueuePolicy,
		Storage:    jetstream.FileStorage,
		Replicas:   l.Replicas,
		MaxMsgs:    l.MaxJobs,
		Discard:    jetstream.DiscardNew,
		Duplicates: l.dupWindow(),
		// A subject is a tenant's: past its bound, the stream refuses the
		// tenant's next job, not every tenant's.
		MaxMsgsPerSubject:    l.perTenant(),
		DiscardNewPerSubject: l.perTenant() > 0,
		RePublish: &jetstream.RePublish{
			Source:      cfg.Subject + ".*",
			Destination: NoticeSubject(cfg.Subject) + ".{{wildcard(1)}}",
			HeadersOnly: true,
		},
	}); err != nil {
		return fmt.Errorf("stream %s: %w", cfg.Stream, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:   cfg.Bucket,
		TTL:      l.Retention,
		MaxBytes: l.MaxResultBytes,
		Storage:  jetstream.FileStorage,
		Replicas: l.Replicas,
		History:  l.History,
	}); err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	if err := BucketDiscardOld(ctx, js, cfg.Bucket); err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Bucket, err)
	}
	if _, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
		Bucket:       cfg.Claims,
		TTL:          l.dupWindow(),
		MaxBytes:     claimBytes,
		MaxValueSize: claimSize,
		Storage:      jetstream.FileStorage,
		Replicas:     l.Replicas,
		History:      1,
	}); err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Claims, err)
	}
	if err := BucketDiscardOld(ctx, js, cfg.Claims); err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Claims, err)
	}
	if err := claimsNoRollup(ctx, js, cfg.Claims); err != nil {
		return fmt.Errorf("bucket %s: %w", cfg.Claims, err)
	}
	return nil
}

// claimsNoRollup has the claims bucket's stream refuse roll-ups, which
// every key-value bucket allows (its Purge is one). A tenant may publish
// on its own keys' subjects, with any headers, and a message with
// Nats-Rollup: all purges the whole stream: every tenant's claims. The
// clients only create and read claims.
func claimsNoRollup(ctx context.Context, js jetstream.JetStream, bucket string) error {
	return editBucket(ctx, js, bucket, func(sc *jetstream.StreamConfig) bool {
		was := sc.AllowRollup
		sc.AllowRollup = false
		return was
	})
}

// dupWindow is the layout's duplicate window.
func (l Layout) dupWindow() time.Duration {
	if l.Duplicates > 0 {
		return l.Duplicates
	}
	return DefaultDuplicates
}

// BucketDiscardOld has the bucket, once full, drop its oldest values to
// store a new one, rather than refuse it (a key-value bucket's default,
// which every `nats kv add` and CreateKeyValue sets): every tenant's
// results share the bucket, and a tenant whose results filled it had
// every other tenant's refused, their jobs run again at each delivery and
// never given a result, for as long as the bucket kept its own (its ttl).
// Dropped, an old result is as one past the ttl: its id runs again if
// sent again. The claims bucket is shared so too.
func BucketDiscardOld(ctx context.Context, js jetstream.JetStream, bucket string) error {
	return editBucket(ctx, js, bucket, func(sc *jetstream.StreamConfig) bool {
		was := sc.Discard
		sc.Discard = jetstream.DiscardOld
		return was != jetstream.DiscardOld
	})
}

// editBucket updates the stream of a bucket by change, which reports
// whether it changed the config (no update is sent otherwise).
func editBucket(ctx context.Context, js jetstream.JetStream, bucket string, change func(*jetstream.StreamConfig) bool) error {
	s, err := js.Stream(ctx, bucketStream(bucket))
	if err != nil {
		return err
	}
	sc := s.CachedInfo().Config
	if !change(&sc) {
		return nil
	}
	_, err = js.UpdateStream(ctx, sc)
	return err
}

// bucketStream is the stream that holds a key-value bucket.
func bucketStream(bucket string) string { return "KV_" + bucket }
