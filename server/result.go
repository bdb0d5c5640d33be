package server

import (
	"io"
	"net/http"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/jail"
)

// resultEventHead is how json.Encoder writes a result event up to the
// result object: api.Event{Type: api.EventResult, Result: res}.
const resultEventHead = `{"type":"` + api.EventResult + `","result":`

// writeResult answers a run with its result, the line writeJSON would
// send, with the output streamed (jail.Result.WriteJSON): the answer to a
// run with 16 MiB of control characters on each stream is never 192 MiB
// in the daemon's memory.
func writeResult(w http.ResponseWriter, res *jail.Result) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	return writeResultLine(w, res, "", "\n")
}

// writeResultLine writes head, the result, then tail.
func writeResultLine(w io.Writer, res *jail.Result, head, tail string) error {
	if _, err := io.WriteString(w, head); err != nil {
		return err
	}
	if err := jail.WriteJSON(w, res); err != nil {
		return err
	}
	_, err := io.WriteString(w, tail)
	return err
}

// result sends the stream's last event, the run's result, as emit would
// have encoded it, with the output streamed. Its write may take longer
// than an output chunk's.
func (e *events) result(res *jail.Result) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.err != nil {
		return
	}
	_ = e.rc.SetWriteDeadline(time.Now().Add(resultTimeout))
	if e.err = writeResultLine(e.w, res, resultEventHead, "}\n"); e.err == nil {
		e.err = e.rc.Flush()
	}
}
