package queue

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/pmjail/pmjail/api"
)

// Config is the `queue.nats` section of the daemon's config: where the
// work-queue stream and the result bucket are, who the worker is to the
// NATS servers, and how much it takes on. Check fills in the defaults.
type Config struct {
	// URLs are the NATS servers, "nats://host:4222"; the client moves to
	// another when one goes away. Required.
	URLs []string `json:"urls"`
	// Credentials is a .creds file (a user JWT and its nkey seed);
	// Nkey a file holding an nkey seed; User and Password (or
	// PasswordFile) a user. At most one way; none connects anonymously.
	Credentials  string `json:"credentials"`
	Nkey         string `json:"nkey"`
	User         string `json:"user"`
	Password     string `json:"password"`
	PasswordFile string `json:"password_file"`
	// InboxPrefix is the prefix of the connection's reply subjects
	// (default "_INBOX"): a tenant's user with one of its own, and
	// subscribe permission on it alone, sees no one else's replies.
	InboxPrefix string `json:"inbox_prefix"`
	// Stream is the work-queue stream the jobs are in (default
	// "PMJAIL_JOBS"); it must exist, made by the operator with its
	// replicas, limits and retention.
	Stream string `json:"stream"`
	// Subject is the jobs' subject prefix (default "pmjail.jobs"): a job
	// for tenant T is published on Subject + "." + T.
	Subject string `json:"subject"`
	// Consumer names the durable consumers all workers share, one per
	// tenant's subject, Consumer + "-" + the tenant (ConsumerName;
	// default "pmjail-workers"); the worker makes each, or updates it to
	// this config's ack wait, max ack pending and max deliver. The one
	// consumer of this very name that workers of earlier versions shared
	// is retired (docs/queue.md).
	Consumer string `json:"consumer"`
	// Bucket is the key-value bucket of results, key the job id (default
	// "pmjail_results"); it must exist.
	Bucket string `json:"bucket"`
	// Claims is the key-value bucket in which a client takes a job id
	// for its job before it submits it (default "pmjail_claims"), key
	// the job id; it must exist. The stream's duplicate check keys a job
	// by what the claim holds, which no other tenant can write or read.
	Claims string `json:"claims"`
	// ResultSubject is the prefix a result is published on, + "." + the
	// job id (default "pmjail.results"); "-" publishes none.
	ResultSubject string `json:"result_subject"`
	// AckWait is how long a job may go without word from its worker
	// before the stream gives it to another (default 30s): a live worker
	// says it is still working every third of it, so a run may outlast it.
	AckWait api.Duration `json:"ack_wait"`
	// MaxAckPending bounds a tenant's jobs handed out and not yet acked,
	// over all workers (default 1000).
	MaxAckPending int `json:"max_ack_pending"`
	// MaxDeliver bounds how often a job is handed out (default 5; -1 for
	// no bound): a job that brings every worker down stops there.
	MaxDeliver int `json:"max_deliver"`
	// Concurrency is how many jobs this worker runs at once (default the
	// daemon's max_concurrency).
	Concurrency int `json:"concurrency"`
}

// Defaults of Config.
const (
	DefaultStream        = "PMJAIL_JOBS"
	DefaultSubject       = "pmjail.jobs"
	DefaultConsumer      = "pmjail-workers"
	DefaultBucket        = "pmjail_results"
	DefaultClaims        = "pmjail_claims"
	DefaultResultSubject = "pmjail.results"
	DefaultAckWait       = 30 * time.Second
	DefaultMaxAckPending = 1000
	DefaultMaxDeliver    = 5
	// NoResultSubject as ResultSubject publishes no result.
	NoResultSubject = "-"
	// minAckWait keeps the in-progress beats (a third of it) far apart
	// enough for a loaded server to take them.
	minAckWait = time.Second
)

var (
	// streamName is what JetStream takes as a stream, consumer or
	// bucket name.
	streamName = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	// subjectTokens is a subject of literal tokens, no wildcards.
	subjectToken = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// Check validates the config, naming the field at fault as
// queue.nats.FIELD, and fills in the defaults; concurrency is the
// daemon's max_concurrency, the default and the bound of Concurrency.
func (c *Config) Check(concurrency int) error {
	const at = "queue.nats."
	if len(c.URLs) == 0 {
		return errors.New(at + "urls: required (such as [\"nats://127.0.0.1:4222\"])")
	}
	for i, u := range c.URLs {
		if err := checkURL(u); err != nil {
			return fmt.Errorf(at+"urls[%d]: %q: %w", i, u, err)
		}
	}
	ways := 0
	for _, set := range []bool{c.Credentials != "", c.Nkey != "", c.User != ""} {
		if set {
			ways++
		}
	}
	if ways > 1 {
		return errors.New(at + "credentials, nkey, user: set at most one way to authenticate")
	}
	for key, path := range map[string]string{"credentials": c.Credentials, "nkey": c.Nkey, "password_file": c.PasswordFile} {
		if path == "" {
			continue
		}
		if _, err := os.Stat(path); err != nil {
			return fmt.Errorf(at+"%s: %w", key, err)
		}
	}
	switch {
	case c.Password != "" && c.PasswordFile != "":
		return errors.New(at + "password, password_file: set one")
	case (c.Password != "" || c.PasswordFile != "") && c.User == "":
		return errors.New(at + "user: required with a password")
	case c.User != "" && c.Password == "" && c.PasswordFile == "":
		return errors.New(at + "password: required with a user (or password_file)")
	}
	def := func(v *string, d string) {
		if *v == "" {
			*v = d
		}
	}
	def(&c.Stream, DefaultStream)
	def(&c.Consumer, DefaultConsumer)
	def(&c.Bucket, DefaultBucket)
	def(&c.Claims, DefaultClaims)
	def(&c.Subject, DefaultSubject)
	def(&c.ResultSubject, DefaultResultSubject)
	def(&c.InboxPrefix, nats.InboxPrefix[:len(nats.InboxPrefix)-1])
	if err := checkSubject(c.InboxPrefix); err != nil {
		return fmt.Errorf(at+"inbox_prefix: %q: %w", c.InboxPrefix, err)
	}
	for key, v := range map[string]string{"stream": c.Stream, "consumer": c.Consumer, "bucket": c.Bucket, "claims": c.Claims} {
		if !streamName.MatchString(v) {
			return fmt.Errorf(at+"%s: %q (want 1 to 64 letters, digits, '-' and '_')", key, v)
		}
	}
	if c.Claims == c.Bucket {
		return fmt.Errorf(at+"claims: %q is the results' bucket too (want a bucket of its own)", c.Claims)
	}
	if err := checkSubject(c.Subject); err != nil {
		return fmt.Errorf(at+"subject: %q: %w", c.Subject, err)
	}
	if c.ResultSubject != NoResultSubject {
		if err := checkSubject(c.ResultSubject); err != nil {
			return fmt.Errorf(at+"result_subject: %q: %w", c.ResultSubject, err)
		}
	}
	switch {
	case c.AckWait == 0:
		c.AckWait = api.Duration(DefaultAckWait)
	case time.Duration(c.AckWait) < minAckWait:
		return fmt.Errorf(at+"ack_wait: %v is below %v", time.Duration(c.AckWait), minAckWait)
	}
	switch {
	case c.MaxAckPending == 0:
		c.MaxAckPending = DefaultMaxAckPending
	case c.MaxAckPending < 0:
		return fmt.Errorf(at+"max_ack_pending: %d is below 0", c.MaxAckPending)
	}
	switch {
	case c.MaxDeliver == 0:
		c.MaxDeliver = DefaultMaxDeliver
	case c.MaxDeliver < -1:
		return fmt.Errorf(at+"max_deliver: %d (want -1 for no bound, or a count)", c.MaxDeliver)
	}
	switch {
	case c.Concurrency == 0:
		c.Concurrency = concurrency
	case c.Concurrency < 0:
		return fmt.Errorf(at+"concurrency: %d is below 0", c.Concurrency)
	case c.Concurrency > concurrency:
		return fmt.Errorf(at+"concurrency: %d is above the daemon's max_concurrency of %d", c.Concurrency, concurrency)
	}
	if c.Concurrency > c.MaxAckPending {
		return fmt.Errorf(at+"concurrency: %d is above max_ack_pending of %d: the worker could never fill its slots", c.Concurrency, c.MaxAckPending)
	}
	return nil
}

// checkURL takes nats://, tls:// and bare host:port server URLs.
func checkURL(u string) error {
	rest := u
	if scheme, after, ok := strings.Cut(u, "://"); ok {
		switch scheme {
		case "nats", "tls":
		default:
			return fmt.Errorf("scheme %q (want nats or tls)", scheme)
		}
		rest = after
	}
	if at := strings.LastIndexByte(rest, '@'); at >= 0 {
		return errors.New("credentials in a URL are refused: set user and password_file, credentials or nkey")
	}
	if rest == "" || strings.ContainsAny(rest, " /,") {
		return errors.New("want nats://host:port")
	}
	return nil
}

// checkSubject takes a subject of literal tokens.
func checkSubject(s string) error {
	for _, tok := range strings.Split(s, ".") {
		if !subjectToken.MatchString(tok) {
			return errors.New("want dot-separated tokens of letters, digits, '-' and '_', no wildcards")
		}
	}
	return nil
}

// jobID is a job id as a key of the bucket and a token of a subject.
var jobID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)

// CheckID refuses a job id the bucket could not key.
func CheckID(id string) error {
	if !jobID.MatchString(id) {
		return fmt.Errorf("job id %q: want 1 to 64 letters, digits, '-' and '_'", id)
	}
	return nil
}

// CheckTenant refuses a tenant name that is not one subject token.
func CheckTenant(t string) error {
	if !subjectToken.MatchString(t) {
		return fmt.Errorf("tenant %q: want letters, digits, '-' and '_'", t)
	}
	return nil
}
