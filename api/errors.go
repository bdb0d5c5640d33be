package api

import "time"

// ErrorBody is the body of every error response: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes why a request was refused.
type ErrorDetail struct {
	// Code is one of the Code constants.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the job field at fault, where one is ("limits.memory").
	Field string `json:"field,omitempty"`
}

// The error codes of ErrorDetail.Code.
const (
	CodeInvalidJob = "invalid_job"
	CodeTooLarge   = "too_large"
	CodeForbidden  = "forbidden"
	// CodeRefreshForbidden: a peer allowed to use the API, but not the
	// daemon's own uid, asked for the host to be probed again.
	CodeRefreshForbidden = "refresh_forbidden"
	CodeQueueFull        = "queue_full"
	// CodeRateLimited: the peer's tenant is over its rate (429, with
	// Retry-After).
	CodeRateLimited      = "rate_limited"
	CodeQueueTimeout     = "queue_timeout"
	CodeDraining         = "draining"
	CodeNotFound         = "not_found"
	CodeMethodNotAllowed = "method_not_allowed"
	// CodeBusy: the daemon has no room to take the request: every slot
	// for reading a job's body is taken (429 when the peer's uid holds its
	// share of them, else 503), or it is short of file descriptors (503).
	CodeBusy = "busy"
	// CodeIdempotencyConflict: a submission's Idempotency-Key was given
	// before with another job (422).
	CodeIdempotencyConflict = "idempotency_conflict"
	// CodeAsyncUnavailable: the daemon keeps no store of async runs (its
	// config names no runs.dir, 503).
	CodeAsyncUnavailable = "async_unavailable"
)

// Health is the body of GET /v1/health.
//
// Its counts are the daemon's for the daemon's own uid (Scope "daemon")
// and the peer's tenant's share for any other peer (Scope "tenant"):
// one tenant does not read another's activity off them. The pools
// (Pooled, Warm), which every tenant's runs take from, are the
// daemon's own uid's only.
type Health struct {
	Status string `json:"status"` // "ok" or "draining"
	// Scope says whose counts these are: HealthScopeDaemon or
	// HealthScopeTenant.
	Scope string `json:"scope"`
	// Tenant names the peer's tenant when Scope is HealthScopeTenant;
	// empty for a peer of none (its counts are then 0: it may not run).
	Tenant         string `json:"tenant,omitempty"`
	Version        string `json:"version,omitempty"`
	API            string `json:"api"`
	InFlight       int    `json:"in_flight"`
	Queued         int    `json:"queued"`
	MaxConcurrency int    `json:"max_concurrency"`
	MaxQueue       int    `json:"max_queue"`
	// Pooled is how many init stages wait, started, for runs (the
	// daemon's pool); 0 in a tenant's health.
	Pooled int `json:"prestarted"`
	// Warm is the daemon's runtimes started ahead of runs, waiting in
	// their whole jails for a job; absent from a tenant's health.
	Warm          *WarmHealth `json:"warm,omitempty"`
	UptimeSeconds float64     `json:"uptime_seconds"`
	PID           int         `json:"pid"`
	// LastReload is the outcome of the last config reload (SIGHUP);
	// absent before the first.
	LastReload *Reload `json:"last_reload,omitempty"`
}

// The scopes of a Health's counts.
const (
	HealthScopeDaemon = "daemon"
	HealthScopeTenant = "tenant"
)

// Reload is the outcome of a config reload.
type Reload struct {
	At time.Time `json:"at"`
	OK bool      `json:"ok"`
	// Error says why the reload was refused; the daemon kept its config.
	Error string `json:"error,omitempty"`
}

// WarmHealth is what the daemon's warm runtimes hold while they wait.
type WarmHealth struct {
	// Idle counts them by runtime.
	Idle map[string]int `json:"idle"`
	// MemoryBytes is the memory their cgroups hold; Memory the same by
	// runtime.
	MemoryBytes uint64            `json:"memory_bytes"`
	Memory      map[string]uint64 `json:"memory"`
}
