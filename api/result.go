package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"
	"unicode/utf8"
)

// Status says how a run ended. The names are the result object's contract.
type Status string

// The statuses of a run.
const (
	StatusOK            Status = "ok"
	StatusError         Status = "error"
	StatusTimeout       Status = "timeout"
	StatusCPULimit      Status = "cpu_limit"
	StatusMemoryLimit   Status = "memory_limit"
	StatusOutputLimit   Status = "output_limit"
	StatusProtocolError Status = "protocol_error"
	StatusRefused       Status = "refused"
	StatusInternalError Status = "internal_error"
	// StatusCancelled is a run stopped before its end because whoever
	// asked for it no longer waits: its client went away, or a daemon's
	// shutdown ended its grace period. Not a fault of pmjail's, which
	// StatusInternalError stays for.
	StatusCancelled Status = "cancelled"
)

// Statuses returns every status, in the order above, for whoever lists
// them all (the daemon's metrics show each from the start).
func Statuses() []Status {
	return []Status{StatusOK, StatusError, StatusTimeout, StatusCPULimit, StatusMemoryLimit,
		StatusOutputLimit, StatusProtocolError, StatusRefused, StatusInternalError, StatusCancelled}
}

// ExitCode is the CLI exit code for a status whose code does not come from
// the guest itself: 124 for a time or output limit, 137 for memory, 125 for
// a run pmjail did not see through (refused, cancelled, or its own
// failure; the status tells which).
func (s Status) ExitCode() (int, bool) {
	switch s {
	case StatusTimeout, StatusCPULimit, StatusOutputLimit:
		return 124, true
	case StatusMemoryLimit:
		return 137, true
	case StatusRefused, StatusInternalError, StatusProtocolError, StatusCancelled:
		return 125, true
	}
	return 0, false
}

// Result is the one structured answer for a run (the contract's result
// object).
type Result struct {
	ID        string          `json:"id"`
	Status    Status          `json:"status"`
	ExitCode  int             `json:"exit_code"`
	Signal    string          `json:"signal,omitempty"`
	Value     json.RawMessage `json:"value,omitempty"`
	Error     *ErrorInfo      `json:"error,omitempty"`
	Stdout    string          `json:"stdout"`
	Stderr    string          `json:"stderr"`
	Truncated Truncated       `json:"truncated"`
	// Encoding says which of Stdout and Stderr is base64 (OutputEncoding):
	// such a stream is carried as its bytes in base64, never altered.
	Encoding Encoding   `json:"encoding,omitzero"`
	Logs     []LogEntry `json:"logs"`
	// LimitsHit names every limit the run met, even one the guest survived
	// (a fork refused under the pids cap).
	LimitsHit []string `json:"limits_hit,omitempty"`
	// Denied counts the system calls the seccomp filter refused, by name.
	Denied map[string]uint64 `json:"denied_syscalls,omitempty"`
	Usage  Usage             `json:"usage"`
	// StartedAt is when the run began (after its wait in the queue);
	// FinishedAt when its result was complete.
	StartedAt  Time `json:"started_at,omitzero"`
	FinishedAt Time `json:"finished_at,omitzero"`
	// QueuedMS is how long the run waited for a run slot in the daemon
	// (always 0 from the CLI, which has no queue).
	QueuedMS int64 `json:"queued_ms"`
	// Labels are the job's labels, echoed.
	Labels  map[string]string `json:"labels,omitempty"`
	Posture *Posture          `json:"posture,omitempty"`
	// Warm says a runtime started ahead of the run, waiting in its whole
	// jail, served it (a daemon's warm runtimes); WarmReason, when the
	// daemon keeps warm runtimes, why none served it.
	Warm       bool   `json:"warm"`
	WarmReason string `json:"warm_reason,omitempty"`
}

// ErrorInfo describes why a run failed.
type ErrorInfo struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Stack   string `json:"stack,omitempty"`
	// Value is what the guest threw, as JSON: a thrown non-Error itself
	// (code "ThrownValue"), or an Error's own properties, its code among
	// them.
	Value json.RawMessage `json:"value,omitempty"`
	// Cause is the guest error's cause, and so on down its chain (a
	// bounded number of links).
	Cause *ErrorInfo `json:"cause,omitempty"`
}

// Truncated says which output stream was cut at the output limit, and
// whether log entries were refused for the run's log budget.
type Truncated struct {
	Stdout bool `json:"stdout"`
	Stderr bool `json:"stderr"`
	Logs   bool `json:"logs,omitempty"`
}

// Encoding says which output stream of a result crosses the wire in
// base64 (EncodingBase64, see OutputEncoding): one that is not valid
// UTF-8, which a JSON string cannot carry unaltered, or that would be
// over twice its size escaped. Empty means text. In Go, Stdout and
// Stderr always hold the bytes as written; MarshalJSON and UnmarshalJSON
// encode and decode them.
type Encoding struct {
	Stdout string `json:"stdout,omitempty"`
	Stderr string `json:"stderr,omitempty"`
}

// OutputEncoding is the encoding a stream's bytes cross the wire in:
// "" for UTF-8 text, EncodingBase64 for bytes that are not, and for text
// that would take more than twice its size as a JSON string. Escaped, a
// control character takes six bytes (\u0001), and so do <, > and &
// (encoding/json's HTML-safe form): a guest printing them would make its
// output six times its size wherever it is held or stored as JSON;
// base64 holds any bytes at four thirds.
func OutputEncoding(s string) string {
	if !utf8.ValidString(s) || escapedOver(s, 2*len(s)) {
		return EncodingBase64
	}
	return ""
}

// escapedOver reports whether s, escaped in a JSON string as
// encoding/json escapes it (quotes not counted), takes more than limit
// bytes. s is valid UTF-8.
func escapedOver(s string, limit int) bool {
	n := 0
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			n += 2
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			n += 6
		case b == 0xe2 && i+2 < len(s) && s[i+1] == 0x80 && (s[i+2] == 0xa8 || s[i+2] == 0xa9):
			n += 6 // U+2028, U+2029
			i += 2
		default:
			n++
		}
		if n > limit {
			return true
		}
	}
	return false
}

// resultJSON is Result without its methods, as it crosses the wire.
type resultJSON Result

// MarshalJSON writes r with each stream Encoding names in base64.
func (r Result) MarshalJSON() ([]byte, error) {
	w := resultJSON(r)
	if r.Encoding.Stdout == EncodingBase64 {
		w.Stdout = base64.StdEncoding.EncodeToString([]byte(r.Stdout))
	}
	if r.Encoding.Stderr == EncodingBase64 {
		w.Stderr = base64.StdEncoding.EncodeToString([]byte(r.Stderr))
	}
	return json.Marshal(&w)
}

// UnmarshalJSON reads a result, decoding each stream Encoding names.
func (r *Result) UnmarshalJSON(b []byte) error {
	var w resultJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	var err error
	if w.Stdout, err = decodeText(w.Stdout, w.Encoding.Stdout); err != nil {
		return fmt.Errorf("result stdout: %w", err)
	}
	if w.Stderr, err = decodeText(w.Stderr, w.Encoding.Stderr); err != nil {
		return fmt.Errorf("result stderr: %w", err)
	}
	*r = Result(w)
	return nil
}

// decodeText returns s as the bytes it carries in encoding.
func decodeText(s, encoding string) (string, error) {
	switch encoding {
	case "":
		return s, nil
	case EncodingBase64:
		b, err := base64.StdEncoding.DecodeString(s)
		return string(b), err
	}
	return "", fmt.Errorf("unknown encoding %q", encoding)
}

// LogEntry is one host.log call.
type LogEntry struct {
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Meta    json.RawMessage `json:"meta,omitempty"`
}

// Usage holds the run's resource figures, from the cgroup's own accounting
// where there is one.
type Usage struct {
	WallMS          int64  `json:"wall_ms"`
	CPUMS           int64  `json:"cpu_ms"`
	PeakMemoryBytes uint64 `json:"peak_memory_bytes"`
	PeakTasks       uint64 `json:"peak_tasks,omitempty"`
	BrokerCalls     int    `json:"broker_calls"`
}

// TimeLayout is how the result's times are written: RFC 3339 in UTC, to
// the millisecond, always three digits (so that the strings sort).
const TimeLayout = "2006-01-02T15:04:05.000Z07:00"

// Time is an instant in a result, written in TimeLayout.
type Time struct{ time.Time }

// MarshalJSON writes t in UTC in TimeLayout.
func (t Time) MarshalJSON() ([]byte, error) {
	return []byte(`"` + t.UTC().Format(TimeLayout) + `"`), nil
}

// UnmarshalJSON reads any RFC 3339 time.
func (t *Time) UnmarshalJSON(b []byte) error {
	return t.Time.UnmarshalJSON(b)
}
