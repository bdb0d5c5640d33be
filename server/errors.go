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

// writeJSON sends v with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
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
