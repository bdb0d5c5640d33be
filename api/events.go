package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
)

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
	// Data is an output chunk, the bytes as written. Chunks are cut only
	// at UTF-8 character boundaries; one that is not UTF-8 text, or would
	// be over twice its size escaped, crosses the wire in base64, and
	// Encoding says so (EncodingBase64, see OutputEncoding; MarshalJSON
	// and UnmarshalJSON convert).
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

// eventJSON is Event without its methods, as it crosses the wire.
type eventJSON Event

// MarshalJSON writes e with its Data in base64 when Encoding says so.
func (e Event) MarshalJSON() ([]byte, error) {
	w := eventJSON(e)
	if e.Encoding == EncodingBase64 {
		w.Data = base64.StdEncoding.EncodeToString([]byte(e.Data))
	}
	return json.Marshal(&w)
}

// UnmarshalJSON reads an event, decoding Data as Encoding says.
func (e *Event) UnmarshalJSON(b []byte) error {
	var w eventJSON
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	data, err := decodeText(w.Data, w.Encoding)
	if err != nil {
		return fmt.Errorf("event data: %w", err)
	}
	w.Data = data
	*e = Event(w)
	return nil
}
