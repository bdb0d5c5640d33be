package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/jail"
)

// APIVersion is the version of the socket API in its paths (/v1/...).
const APIVersion = "v1"

// NDJSON is the media type a client asks for to get a run as a stream of
// events.
const NDJSON = "application/x-ndjson"

// The event types of a streamed run, in the "type" field.
const (
	EventStdout = "stdout" // Data: a chunk of the guest's standard output
	EventStderr = "stderr" // Data: a chunk of its standard error
	EventLog    = "log"    // Log: one accepted host.log call
	EventResult = "result" // Result: the run's result object, always last
)

// Event is one line of a streamed run.
type Event struct {
	Type string `json:"type"`
	// Data is an output chunk. Chunks are cut only at UTF-8 character
	// boundaries; bytes that are not UTF-8 arrive as U+FFFD (the result's
	// stdout and stderr are the authoritative copy).
	Data   string       `json:"data,omitempty"`
	Log    *ipc.Log     `json:"log,omitempty"`
	Result *jail.Result `json:"result,omitempty"`
}

// Health is the body of GET /v1/health.
type Health struct {
	Status         string `json:"status"` // "ok" or "draining"
	Version        string `json:"version,omitempty"`
	API            string `json:"api"`
	InFlight       int    `json:"in_flight"`
	Queued         int    `json:"queued"`
	MaxConcurrency int    `json:"max_concurrency"`
	MaxQueue       int    `json:"max_queue"`
	// Pooled is how many init stages wait, started, for runs (the
	// daemon's pool).
	Pooled        int     `json:"prestarted"`
	UptimeSeconds float64 `json:"uptime_seconds"`
	PID           int     `json:"pid"`
	// LastReload is the outcome of the last config reload (SIGHUP);
	// absent before the first.
	LastReload *Reload `json:"last_reload,omitempty"`
}

// Reload is the outcome of a config reload.
type Reload struct {
	At time.Time `json:"at"`
	OK bool      `json:"ok"`
	// Error says why the reload was refused; the daemon kept its config.
	Error string `json:"error,omitempty"`
}

// ErrorBody is the body of every error response: {"error": {...}}.
type ErrorBody struct {
	Error ErrorDetail `json:"error"`
}

// ErrorDetail describes why a request was refused.
type ErrorDetail struct {
	// Code is one of: invalid_job, too_large, forbidden, queue_full,
	// queue_timeout, draining, not_found, method_not_allowed, internal.
	Code    string `json:"code"`
	Message string `json:"message"`
	// Field names the job field at fault, where one is ("limits.memory").
	Field string `json:"field,omitempty"`
}

// Error is a refusal by the daemon: a non-2xx answer.
type Error struct {
	StatusCode int
	ErrorDetail
	// RetryAfter is the daemon's hint on a 429 or 503.
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("pmjail daemon: %d %s: %s", e.StatusCode, e.Code, e.Message)
	if e.RetryAfter > 0 {
		msg += fmt.Sprintf(" (retry after %v)", e.RetryAfter)
	}
	return msg
}

// decodeError turns an error body into an *Error; a body that is not one
// keeps its first bytes as the message.
func decodeError(status int, body []byte, retryAfter time.Duration) *Error {
	e := &Error{StatusCode: status, RetryAfter: retryAfter}
	var b ErrorBody
	if err := json.Unmarshal(body, &b); err == nil && b.Error.Code != "" {
		e.ErrorDetail = b.Error
		return e
	}
	e.Code = "http_" + fmt.Sprint(status)
	if len(body) > 512 {
		body = body[:512]
	}
	e.Message = string(body)
	return e
}
