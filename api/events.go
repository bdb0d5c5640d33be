package api

import "encoding/json"

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
	// boundaries; a chunk that is not UTF-8 text is its bytes in base64,
	// and Encoding says so (EncodingBase64).
	Data     string  `json:"data,omitempty"`
	Encoding string  `json:"encoding,omitempty"`
	Log      *Log    `json:"log,omitempty"`
	Result   *Result `json:"result,omitempty"`
}

// Log is one entry the guest logged through the broker, as it happens.
type Log struct {
	Level   string          `json:"level"`
	Message string          `json:"message"`
	Meta    json.RawMessage `json:"meta,omitempty"`
}
