package ipc

import (
	"encoding/json"
	"fmt"
)

// Log is one entry the guest logged through the broker.
type Log struct {
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Meta    json.RawMessage `json:"meta,omitempty"`
}

// GuestError is what the guest reports when its code threw.
type GuestError struct {
	Name    string `json:"name"`
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
	// Value is what was thrown, as JSON: a thrown non-Error itself, or an
	// Error's own properties (its code among them).
	Value json.RawMessage `json:"value,omitempty"`
	// Cause is the error's cause, and so on down its chain.
	Cause *GuestError `json:"cause,omitempty"`
}

// Reply error codes (PROTOCOL.md).
const (
	CodeDenied         = "denied"
	CodeNotFound       = "not_found"
	CodeInvalidRequest = "invalid_request"
	CodeUnsupported    = "unsupported"
	CodeTimeout        = "timeout"
	CodeRateLimited    = "rate_limited"
	CodeTooLarge       = "too_large"
	CodeInternal       = "internal"
)

// CallError is a failed broker call as the guest sees it.
type CallError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *CallError) Error() string { return e.Code + ": " + e.Message }

func callErr(code, format string, args ...any) *CallError {
	return &CallError{Code: code, Message: fmt.Sprintf(format, args...)}
}

// startFrame is the host's first frame.
type startFrame struct {
	Type         string          `json:"type"`
	Input        json.RawMessage `json:"input"`
	Capabilities Capabilities    `json:"capabilities"`
	Options      startOptions    `json:"options"`
	// Source is the job's program, for a runtime started before its job
	// (a warm runtime), which evaluates it from memory; absent otherwise,
	// where the program is a file in the job's root.
	Source *StartSource `json:"source,omitempty"`
}

// StartSource is the job's program in the start frame (a warm runtime's).
type StartSource struct {
	// Text is the program's text.
	Text string `json:"text"`
	// MediaType is the type Deno evaluates the text as, which says its
	// dialect (runtimes.Dialect): application/typescript, text/jsx,
	// text/tsx; application/javascript when empty.
	MediaType string `json:"media_type,omitempty"`
}

type startOptions struct {
	Timing string `json:"timing"`
	// MaxFrame is the largest frame the host reads, so that the guest can
	// say a value is too large before it sends it.
	MaxFrame int `json:"max_frame,omitempty"`
}

// replyFrame answers one call.
type replyFrame struct {
	Type  string          `json:"type"`
	ID    uint64          `json:"id"`
	OK    bool            `json:"ok"`
	Value json.RawMessage `json:"value,omitempty"`
	Error *CallError      `json:"error,omitempty"`
	// Credit, on an accepted log call's reply, is how far the guest may
	// log without waiting for replies (see logCredit).
	Credit *logCredit `json:"credit,omitempty"`
}

// logCredit is what the run's budgets still hold, as of the reply that
// carries it: the guest may send that many log calls as notes (no reply)
// and answer them itself, every one of which the host accepts as the
// reply would have. It is the host's own count, so a guest that lies
// about it only misleads itself: notes pass every check a call does.
// None is given while the scrubber holds secrets, which can lengthen a
// message past what the guest counted.
type logCredit struct {
	Calls   int `json:"calls"`   // broker calls of any kind
	Logs    int `json:"logs"`    // log entries
	Bytes   int `json:"bytes"`   // bytes of log messages
	Message int `json:"message"` // the longest message kept whole
	Frame   int `json:"frame"`   // the largest frame body
}

// guestFrame is the union of what the guest may send; which fields count
// depends on Type.
type guestFrame struct {
	Type   string          `json:"type"`
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Value  json.RawMessage `json:"value"`
	Error  *GuestError     `json:"error"`
	// Code is an exit frame's exit code.
	Code *int `json:"code"`
}

// Frame types.
const (
	typeStart = "start"
	typeReply = "reply"
	typeCall  = "call"
	typeNote  = "note"
	typeDone  = "done"
	typeError = "error"
	// typeReady is the guest's word that its runtime has started and
	// waits for the start frame: its first frame, or none.
	typeReady = "ready"
	// typeExit is the guest's last word, its exit code, as its runtime
	// begins to exit (SessionConfig.OnExit).
	typeExit = "exit"
)
