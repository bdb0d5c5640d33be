package server

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/capread"
)

// The error codes of the API, as package api names them.
const (
	codeInvalid          = api.CodeInvalidJob
	codeTooLarge         = api.CodeTooLarge
	codeForbidden        = api.CodeForbidden
	codeRefreshForbidden = api.CodeRefreshForbidden
	codeQueueFull        = api.CodeQueueFull
	codeRateLimited      = api.CodeRateLimited
	codeQueueTimeout     = api.CodeQueueTimeout
	codeDraining         = api.CodeDraining
	codeNotFound         = api.CodeNotFound
	codeMethodNotAllowed = api.CodeMethodNotAllowed
	codeBusy             = api.CodeBusy
)

// answerTimeout bounds the write of an answer the daemon holds whole
// and small (an error, a run's record, health, the posture, the OpenAPI
// document, /metrics): a client has it as soon as it reads, and one
// that never reads must not hold its connection, the handler's
// goroutine and the answer for ever (nor a shutdown for its grace).
// Answers that carry a run's output have deadlines of their own
// (resultTimeout, eventWriteTimeout), set before each write.
const answerTimeout = 10 * time.Second

// answerDeadline gives the answer w is about to write answerTimeout. A
// deadline outlives its request on a kept connection: each answer sets
// its own.
func answerDeadline(w http.ResponseWriter) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(answerTimeout))
}

// writeJSON sends v with the given status, within answerTimeout.
func writeJSON(w http.ResponseWriter, status int, v any) {
	answerDeadline(w)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v)
}

// writeError sends an error body; retry > 0 adds Retry-After.
func writeError(w http.ResponseWriter, status int, code, msg, field string, retry time.Duration) {
	if retry > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((retry+time.Second-1)/time.Second)))
	}
	writeJSON(w, status, api.ErrorBody{Error: api.ErrorDetail{Code: code, Message: msg, Field: field}})
}

// isTooLarge reports a job body over the cap, whichever reader found it:
// the HTTP body's (which also has the connection closed after the answer)
// or job.Decode's own.
func isTooLarge(err error) bool {
	_, body := errors.AsType[*http.MaxBytesError](err)
	_, decoded := errors.AsType[*capread.TooLargeError](err)
	return body || decoded
}
