package queue

import (
	"encoding/json"
	"fmt"
	"unicode/utf8"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/jsonstr"
)

// refused is the result of a refused job.
func refused(r *Refusal) *api.Result {
	msg := r.Message
	return &api.Result{Status: api.StatusRefused, ExitCode: -1, Logs: []api.LogEntry{},
		Error: &api.ErrorInfo{Code: r.Code, Message: msg}}
}

// encode is the result as JSON within max bytes: what does not fit of
// its output is cut, and marked so in Truncated; only an output cut whole
// that still does not fit costs the result its value, logs and posture,
// and then the guest's error its stack, value, causes and the end of its
// message (cutError).
func encode(res *api.Result, max int64) ([]byte, error) {
	data, err := json.Marshal(res)
	if err != nil || int64(len(data)) <= max-resultSlack {
		return data, err
	}
	cut := *res
	over := int64(len(data)) - (max - resultSlack)
	for _, s := range []struct {
		out    *string
		trunc  *bool
		base64 bool
	}{{&cut.Stderr, &cut.Truncated.Stderr, cut.Encoding.Stderr != ""}, {&cut.Stdout, &cut.Truncated.Stdout, cut.Encoding.Stdout != ""}} {
		if over <= 0 || *s.out == "" {
			continue
		}
		var saved int64
		*s.out, saved = cutOutput(*s.out, s.base64, over)
		*s.trunc = true
		over -= saved
	}
	if over > 0 {
		cut.Value = nil
		cut.Logs = []api.LogEntry{}
		cut.Posture = nil
	}
	data, err = json.Marshal(&cut)
	if err != nil {
		return nil, err
	}
	// A guest's error is bounded by the frame cap, not by a message's size:
	// kept whole, a result that cannot be stored sent the job back, to be
	// run again at each delivery and never have a result.
	if over := int64(len(data)) - (max - resultSlack); over > 0 && cut.Error != nil {
		cut.Error = cutError(cut.Error, over)
		if data, err = json.Marshal(&cut); err != nil {
			return nil, err
		}
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("result of %d bytes over the servers' max_payload of %d even with its output and error cut", len(data), max)
	}
	return data, nil
}

// maxErrorCode is how much of a guest's error code (its name, which a
// forged frame may make as large as the frame cap) a cut error keeps.
const maxErrorCode = 256

// errorCut ends the message of an error cut to fit.
const errorCut = " [cut: the error did not fit in the result's message]"

// cutError is e, a guest's error, at least over bytes shorter as JSON: its
// code and the start of its message, which says it was cut; its stack,
// value and causes are dropped.
func cutError(e *api.ErrorInfo, over int64) *api.ErrorInfo {
	full, _ := json.Marshal(e)
	c := &api.ErrorInfo{Code: e.Code, Message: e.Message}
	if n := int64(jsonstr.Len(c.Code) - 2); n > maxErrorCode {
		c.Code, _ = cutOutput(c.Code, false, n-maxErrorCode)
	}
	small, _ := json.Marshal(c)
	if rest := over - int64(len(full)-len(small)) + int64(len(errorCut)); rest > 0 {
		c.Message, _ = cutOutput(c.Message, false, rest)
	}
	c.Message += errorCut
	return c
}

// cutOutput drops the end of out, a stream in base64 on the wire or text
// (valid UTF-8: job.Assemble sends other bytes in base64), until its JSON
// form is at least over bytes shorter, or out is gone; it returns what is
// kept, the stream's first bytes as written (text cut at a character),
// and by how much the JSON form shrank.
func cutOutput(out string, base64 bool, over int64) (string, int64) {
	if base64 {
		// Each 3 bytes or fewer take 4 characters.
		wire := func(n int) int64 { return 4 * int64((n+2)/3) }
		keep := max(len(out)-int(3*((over+3)/4)), 0)
		for keep > 0 && wire(len(out))-wire(keep) < over {
			keep--
		}
		return out[:keep], wire(len(out)) - wire(keep)
	}
	var saved int64
	end := len(out)
	for end > 0 && saved < over {
		_, size := utf8.DecodeLastRuneInString(out[:end])
		saved += int64(jsonstr.Len(out[end-size:end]) - 2)
		end -= size
	}
	return out[:end], saved
}
