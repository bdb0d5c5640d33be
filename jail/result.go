package jail

import (
	"errors"

	"github.com/pmjail/pmjail/api"
)

// Status says how a run ended: the socket contract's api.Status, which the
// engine builds as it is.
type Status = api.Status

// The statuses of a run.
const (
	StatusOK            = api.StatusOK
	StatusError         = api.StatusError
	StatusTimeout       = api.StatusTimeout
	StatusCPULimit      = api.StatusCPULimit
	StatusMemoryLimit   = api.StatusMemoryLimit
	StatusOutputLimit   = api.StatusOutputLimit
	StatusProtocolError = api.StatusProtocolError
	StatusRefused       = api.StatusRefused
	StatusInternalError = api.StatusInternalError
	StatusCancelled     = api.StatusCancelled
)

// ErrInitEnded is an Outcome's error when the jail's pid 1 ended without
// saying how the runtime did (status internal_error): something outside
// the run killed it, or it failed itself.
var ErrInitEnded = errors.New("the init stage ended without reporting the runtime's exit")

// Statuses returns every status, for whoever lists them all (the daemon's
// metrics show each from the start).
func Statuses() []Status { return api.Statuses() }

// Result is the one structured answer for a run: the engine fills the
// contract's result object directly.
type Result = api.Result

// ErrorInfo describes why a run failed.
type ErrorInfo = api.ErrorInfo

// Truncated says which output stream was cut at the output limit.
type Truncated = api.Truncated

// LogEntry is one host.log call.
type LogEntry = api.LogEntry

// Usage holds the run's resource figures.
type Usage = api.Usage
