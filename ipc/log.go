package ipc

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"

	"github.com/pmjail/pmjail/internal/jsonstr"
)

type logParams struct {
	Message *string         `json:"message"`
	Meta    json.RawMessage `json:"meta"`
}

var jsonNull = json.RawMessage("null")

const truncatedMark = "…[truncated]"

// handleLog records one log call, within the run's count and byte budgets:
// a guest must not be able to grow the supervisor's memory through logs.
func (s *session) handleLog(level string, raw json.RawMessage) (json.RawMessage, *CallError) {
	if !s.cfg.Capabilities.Log {
		return nil, callErr(CodeDenied, "the job did not declare the log capability")
	}
	var p logParams
	if err := json.Unmarshal(raw, &p); err != nil || p.Message == nil {
		return nil, callErr(CodeInvalidRequest, "log params must be {message: string, meta?: any}")
	}
	msg := *p.Message
	if len(msg) > s.ceil.MaxLogMessage {
		cut := s.ceil.MaxLogMessage
		for cut > 0 && !utf8.RuneStart(msg[cut]) {
			cut--
		}
		msg = msg[:cut] + truncatedMark
	}
	meta := p.Meta
	if bytes.Equal(bytes.TrimSpace(meta), jsonNull) {
		meta = nil
	}
	if len(meta) > s.ceil.MaxLogMessage {
		return nil, callErr(CodeTooLarge, "log meta over %d bytes", s.ceil.MaxLogMessage)
	}
	// A guest that pieced a secret together from what origins sent it must
	// not pass it on through the run's logs (the result, the daemon's log).
	msg = s.broker.scrubber.scrub(msg)
	if len(meta) > 0 {
		if scrubbed := s.broker.scrubber.scrub(string(meta)); scrubbed != string(meta) {
			meta = json.RawMessage(scrubbed)
			if !json.Valid(meta) {
				meta, _ = json.Marshal(redacted)
			}
		}
	}
	// The budget counts a log as the result holds it, in JSON: a control
	// character, <, > or & takes six bytes there (\u003c), so a budget
	// of raw bytes let a guest make the daemon hold and store six times
	// it, in the result and again in the run's events. The meta is kept
	// in the form it is written in (compacted, HTML-safe), and the
	// message counted as encoding/json escapes it, quotes aside.
	if len(meta) > 0 {
		final, err := json.Marshal(meta)
		if err != nil {
			return nil, callErr(CodeInvalidRequest, "log meta is not valid JSON")
		}
		meta = final
	}
	entry := Log{Level: level, Message: msg, Meta: meta}

	s.mu.Lock()
	size := jsonstr.Len(msg) - 2 + len(meta)
	if len(s.out.Logs) >= s.ceil.MaxLogs || s.logBytes+size > s.ceil.MaxLogBytes {
		s.out.LogsDropped++
		s.mu.Unlock()
		return nil, callErr(CodeRateLimited, "the run's log budget (%d entries, %d bytes) is spent", s.ceil.MaxLogs, s.ceil.MaxLogBytes)
	}
	s.logBytes += size
	s.out.Logs = append(s.out.Logs, entry)
	s.mu.Unlock()

	if s.cfg.OnLog != nil {
		s.cfg.OnLog(entry)
	}
	return jsonNull, nil
}
