package queue

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/pmjail/pmjail/api"
)

// Client submits jobs to the stream and waits on their results, as
// `pmjail submit --nats` does. It is safe for concurrent use.
type Client struct {
	cfg    Config
	nc     *nats.Conn
	js     jetstream.JetStream
	kv     *tenantKV // the results
	claims *tenantKV
}

// Dial connects to the servers of cfg, of which it reads the URLs, the
// credentials, the stream, the subject and the buckets (empty ones take
// the defaults of Config). It asks for no stream's info, which a
// tenant's user may not (tenantKV): a bucket missing is the first
// submit's or wait's error, ErrNoBucket.
func Dial(ctx context.Context, cfg Config) (*Client, error) {
	// A client's config is the worker's less the worker's own settings.
	if err := cfg.Check(1); err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg}
	var err error
	if c.nc, err = connect(&cfg, "pmjail submit"); err != nil {
		return nil, err
	}
	if c.js, err = jetstream.New(c.nc); err != nil {
		c.nc.Close()
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	c.kv = &tenantKV{nc: c.nc, js: c.js, name: cfg.Bucket, field: "bucket"}
	c.claims = &tenantKV{nc: c.nc, js: c.js, name: cfg.Claims, field: "claims"}
	return c, nil
}

// Close closes the connection.
func (c *Client) Close() { c.nc.Close() }

// NewID is a fresh job id.
func NewID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ErrIDConflict is the error of a job id given before with another job:
// the id keeps the first job and its result.
var ErrIDConflict = errors.New("given before with another job")

// Submit publishes the job for tenant under id, and returns once the
// stream holds it. The same job sent again under its id within the
// stream's duplicate window is stored once; after it, a worker finds
// the first one's result and does not run it again. Another job under
// an id claimed within the window is ErrIDConflict, at once; after it,
// SubmitWait tells it by the stored result's digest.
func (c *Client) Submit(ctx context.Context, tenant, id string, job *api.Job) error {
	_, err := c.submit(ctx, tenant, id, job)
	return err
}

// submit is Submit, and returns the job's digest.
func (c *Client) submit(ctx context.Context, tenant, id string, job *api.Job) (string, error) {
	if err := CheckTenant(tenant); err != nil {
		return "", err
	}
	if err := CheckID(id); err != nil {
		return "", err
	}
	data, err := json.Marshal(job)
	if err != nil {
		return "", fmt.Errorf("encode job: %w", err)
	}
	sum := digest(data)
	nonce, err := c.claim(ctx, tenant, id, sum)
	if err != nil {
		return "", err
	}
	// The stream's duplicate check keys a message by whatever
	// Nats-Msg-Id its publisher gives, on any subject: keyed by the job
	// id alone, another tenant that published first under bob's id made
	// bob's job a duplicate the stream dropped. The claim's nonce is
	// bob's to read alone, so only bob's own job under the id is one.
	msg := &nats.Msg{Subject: c.cfg.Subject + "." + tenant, Header: nats.Header{HeaderID: []string{id}}, Data: data}
	for try := 0; ; try++ {
		_, err := c.js.PublishMsg(ctx, msg, jetstream.WithMsgID(Key(tenant, id)+"."+nonce), jetstream.WithExpectStream(c.cfg.Stream))
		if err == nil {
			return sum, nil
		}
		// A clustered stream refuses a message whose id one in flight
		// has (the same job sent at once by another client) rather than
		// call it a duplicate: once that one is stored, this one is.
		var apiErr *jetstream.APIError
		if !errors.As(err, &apiErr) || apiErr.ErrorCode != errCodeMsgIDInFlight || try == claimTries-1 {
			return "", fmt.Errorf("submit job %s: %w", id, refusedBy(c.nc, err, msg.Subject))
		}
		if err := backoff(ctx, try); err != nil {
			return "", fmt.Errorf("submit job %s: %w", id, err)
		}
	}
}

// errCodeMsgIDInFlight is JetStream's error of a message whose id is
// one the stream is storing ("duplicate message id is in process").
const errCodeMsgIDInFlight jetstream.ErrorCode = 10158

// claimTries is how many times a claim is read, or a job sent, when
// another client's of the same id is under way; backoff spaces them.
const claimTries = 8

// backoff waits before try+1 of claimTries: 10 ms doubling, about 1.3 s
// in all, or until ctx ends.
func backoff(ctx context.Context, try int) error {
	return sleep(ctx, 10*time.Millisecond<<try)
}

// claim takes tenant's job id for the job of digest sum in the claims
// bucket, or finds the id taken for it already (the same job sent
// again), and returns the claim's nonce; an id taken for another job is
// ErrIDConflict. A claim lasts the stream's duplicate window: a job sent
// again after it is one the stream stores again, as before claims.
func (c *Client) claim(ctx context.Context, tenant, id, sum string) (string, error) {
	key := Key(tenant, id)
	// A claim not found after the create found it is made again: it
	// lapsed between the two, or the read was answered by a replica
	// that has not stored it yet (a direct get is any replica's), which
	// a later read finds.
	for try := range claimTries {
		if try > 0 {
			if err := backoff(ctx, try-1); err != nil {
				return "", fmt.Errorf("claim job id %s: %w", id, err)
			}
		}
		nonce := NewID()
		err := c.claims.create(ctx, key, []byte(sum+" "+nonce))
		if err == nil {
			return nonce, nil
		}
		if errors.Is(err, ErrNoBucket) {
			return "", err
		}
		if !errors.Is(err, jetstream.ErrKeyExists) {
			return "", fmt.Errorf("claim job id %s: %w", id, err)
		}
		v, err := c.claims.get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue
		}
		if errors.Is(err, ErrNoBucket) {
			return "", err
		}
		if err != nil {
			return "", fmt.Errorf("claim job id %s: %w", id, err)
		}
		first, nonce, ok := strings.Cut(string(v), " ")
		if !ok || !lowerHex(first, 2*sha256.Size) || !lowerHex(nonce, len(NewID())) {
			return "", fmt.Errorf("claim job id %s: the claim under %s is not one a client made (%.80q)", id, key, v)
		}
		if err := conflict(id, first, sum); err != nil {
			return "", err
		}
		return nonce, nil
	}
	return "", fmt.Errorf("claim job id %s: its claim was there to create but not to read, %d times", id, claimTries)
}

// lowerHex tells whether s is n lowercase hex digits, as a digest and a
// nonce a client writes are: another tenant cannot write a claim, but a
// tenant's own by hand is read as a conflict or keys its job by junk.
func lowerHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return false
		}
	}
	return true
}

// conflict is ErrIDConflict when the stored digest is another job's; a
// result stored without one (by an older worker) is taken as the job's.
func conflict(id, stored, sum string) error {
	if stored != "" && stored != sum {
		return fmt.Errorf("job id %s: %w; the id keeps the first job's result", id, ErrIDConflict)
	}
	return nil
}

// Wait waits for the result of tenant's job id, however long ago it was
// stored, until ctx ends.
func (c *Client) Wait(ctx context.Context, tenant, id string) (*api.Result, error) {
	res, _, err := c.wait(ctx, tenant, id)
	return res, err
}

// resultPoll is how often a wait reads the bucket for its result besides
// the result subject's word: a result published while the connection
// moved to another server is not heard, and with no result subject
// ("-", or another than the workers') the bucket alone tells.
const resultPoll = time.Second

// heardRetry is how soon a wait reads the bucket again when a result it
// heard of is not there yet (a replica a moment behind its leader
// answered); it doubles up to resultPoll.
const heardRetry = 25 * time.Millisecond

// wait is Wait, and returns the digest of the job the result is of. It
// hears of the result on the result subject and reads it from the
// bucket, by a direct get of its key: what it hears is only a cue, as a
// subject's message is any publisher's its permissions allow, and it
// makes no consumer, which a tenant may not (a consumer's deliver subject
// is any subject of the account, its deliveries the server's:
// deploy/queue/nats-server.conf).
func (c *Client) wait(ctx context.Context, tenant, id string) (*api.Result, string, error) {
	heard := make(chan *nats.Msg, 1)
	if c.cfg.ResultSubject != NoResultSubject {
		sub, err := c.nc.Subscribe(c.cfg.ResultSubject+"."+Key(tenant, id), func(m *nats.Msg) {
			select {
			case heard <- m:
			default:
			}
		})
		if err != nil {
			return nil, "", fmt.Errorf("wait for result %s: %w", id, err)
		}
		defer func() { _ = sub.Unsubscribe() }()
		// Subscribed before the first read: a result stored after it is
		// heard of.
		if err := c.nc.FlushTimeout(opTimeout); err != nil {
			return nil, "", fmt.Errorf("wait for result %s: %w", id, err)
		}
	}
	poll := time.NewTimer(0)
	defer poll.Stop()
	next := resultPoll
	var last error
	read := false
	for {
		select {
		case <-ctx.Done():
			if last != nil {
				return nil, "", fmt.Errorf("wait for result %s: %w (last read: %v)", id, context.Cause(ctx), last)
			}
			return nil, "", fmt.Errorf("wait for result %s: %w", id, context.Cause(ctx))
		case <-heard:
			next = heardRetry
		case <-poll.C:
		}
		gctx, cancel := context.WithTimeout(ctx, opTimeout)
		res, sum, err := c.get(gctx, tenant, id)
		cancel()
		if err == nil {
			return res, sum, nil
		}
		// A bucket missing, or refused, at the first read is a set-up's
		// error; later, a moment with no node holding it answering.
		if errors.Is(err, ErrNoBucket) && !read {
			return nil, "", err
		}
		if errors.Is(err, nats.ErrPermissionViolation) && !read {
			return nil, "", fmt.Errorf("wait for result %s: %w", id, err)
		}
		read = true
		if !errors.Is(err, ErrNoResult) {
			last = err
		}
		poll.Reset(next)
		next = min(2*next, resultPoll)
	}
}

// SubmitWait submits the job for tenant under id and waits for its
// result; a result of another job given before under the id is
// ErrIDConflict, also when the stream took this one after its
// duplicate window (its worker refuses it).
func (c *Client) SubmitWait(ctx context.Context, tenant, id string, job *api.Job) (*api.Result, error) {
	sum, err := c.submit(ctx, tenant, id, job)
	if err != nil {
		return nil, err
	}
	res, stored, err := c.wait(ctx, tenant, id)
	if err != nil {
		return nil, err
	}
	if err := conflict(id, stored, sum); err != nil {
		return nil, err
	}
	return res, nil
}

// Run submits the job for tenant under a fresh id and waits for its
// result.
func (c *Client) Run(ctx context.Context, tenant string, job *api.Job) (*api.Result, error) {
	return c.SubmitWait(ctx, tenant, NewID(), job)
}

// ErrNoResult is Get's answer for a job with no stored result.
var ErrNoResult = errors.New("no result stored")

// Get returns the stored result of tenant's job id, or ErrNoResult.
func (c *Client) Get(ctx context.Context, tenant, id string) (*api.Result, error) {
	res, _, err := c.get(ctx, tenant, id)
	return res, err
}

// get is Get, and returns the digest of the job the result is of.
func (c *Client) get(ctx context.Context, tenant, id string) (*api.Result, string, error) {
	v, err := c.kv.get(ctx, Key(tenant, id))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, "", fmt.Errorf("job %s: %w", id, ErrNoResult)
	}
	if errors.Is(err, ErrNoBucket) {
		return nil, "", err
	}
	if err != nil {
		return nil, "", fmt.Errorf("job %s: %w", id, err)
	}
	return decode(id, v)
}

// The stored record of a job is its api.Result's JSON with one field
// more, the digest of the job's message: a reader of api.Result passes
// over it, and a worker given the id again tells the same job from
// another.
const digestField = "job_sha256"

// digest is the digest of a job's message data.
func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// record is the stored record of res, the result of the job of digest sum.
func record(res []byte, sum string) []byte {
	out := make([]byte, 0, len(res)+len(digestField)+len(sum)+6)
	out = append(out, `{"`+digestField+`":"`+sum+`"`...)
	if rest := res[1:]; len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, res[1:]...)
}

// recordSlack is what record adds to a result.
const recordSlack = len(digestField) + 2*sha256.Size + 8

// decode reads a stored record: the result and its job's digest (empty
// in a record stored without one).
func decode(id string, data []byte) (*api.Result, string, error) {
	var res api.Result
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, "", fmt.Errorf("result %s: %w", id, err)
	}
	var d struct {
		Sum string `json:"job_sha256"` // digestField
	}
	if err := json.Unmarshal(data, &d); err != nil {
		return nil, "", fmt.Errorf("result %s: %s: %w", id, digestField, err)
	}
	return &res, d.Sum, nil
}
