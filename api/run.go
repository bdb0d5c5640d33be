package api

// The headers of an async submission.
const (
	// PreferAsync, in a Prefer header (RFC 7240), asks POST /v1/runs to
	// answer 202 at once, with the run's id and its Location, instead of
	// the result.
	PreferAsync = "respond-async"
	// IdempotencyKey names the header of a client's key for a submission:
	// the same key from the same owner (peer uid, or tenant) answers with
	// the run it first made, and a different job under it is refused.
	IdempotencyKey = "Idempotency-Key"
)

// RunState says where an async run is.
type RunState string

// The states of an async run. A run is queued until it has a run slot,
// running until its result is complete, then done or cancelled (DELETE,
// a shutdown, or a daemon that stopped while it was queued or running).
const (
	RunQueued    RunState = "queued"
	RunRunning   RunState = "running"
	RunDone      RunState = "done"
	RunCancelled RunState = "cancelled"
)

// Ended reports whether the run has its final result.
func (s RunState) Ended() bool { return s == RunDone || s == RunCancelled }

// Run is an async run: the body of a 202 submission (state queued), of
// GET /v1/runs/{id} and of DELETE /v1/runs/{id}.
type Run struct {
	ID          string   `json:"id"`
	Status      RunState `json:"status"`
	SubmittedAt Time     `json:"submitted_at"`
	// Result is the run's result once its status is done or cancelled.
	Result *Result `json:"result,omitempty"`
}

// Batch is the body of POST /v1/batches: jobs each run as its own async
// run.
type Batch struct {
	Jobs []Job `json:"jobs"`
}

// BatchRuns answers a batch: one run per job, in the jobs' order.
type BatchRuns struct {
	Runs []Run `json:"runs"`
}
