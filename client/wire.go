package client

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/pmjail/pmjail/api"
)

// APIVersion is the version of the socket API this client speaks.
const APIVersion = api.APIVersion

// Error is a refusal by the daemon: a non-2xx answer.
type Error struct {
	StatusCode int
	api.ErrorDetail
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
	var b api.ErrorBody
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
