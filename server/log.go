package server

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"unicode/utf8"
)

// Level is the config's log level.
func (c *Config) Level() (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return l, fmt.Errorf("log_level: %q (want debug, info, warn or error)", c.LogLevel)
	}
	return l, nil
}

// NewLogger is the daemon's structured log: one JSON object a line on w,
// each key with one plain value, so that a log pipeline can index every
// key by one type (see plainAttr).
func NewLogger(w io.Writer, level slog.Leveler) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: level, ReplaceAttr: plainAttr}))
}

// plainAttr rewrites what slog's JSON handler would write in a form log
// pipelines choke on: a duration becomes "30s", not a count of
// nanoseconds; an error its message; a nil value (a nil error, pointer,
// slice or map) is dropped or written empty rather than null.
func plainAttr(_ []string, a slog.Attr) slog.Attr {
	switch a.Value.Kind() {
	case slog.KindDuration:
		return slog.String(a.Key, a.Value.Duration().String())
	case slog.KindAny:
	default:
		return a
	}
	v := a.Value.Any()
	switch x := v.(type) {
	case nil:
		return slog.Attr{}
	case error:
		if isNil(x) {
			return slog.Attr{}
		}
		return slog.String(a.Key, x.Error())
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice:
		if rv.IsNil() {
			return slog.Any(a.Key, reflect.MakeSlice(rv.Type(), 0, 0).Interface())
		}
	case reflect.Map:
		if rv.IsNil() {
			return slog.Any(a.Key, reflect.MakeMap(rv.Type()).Interface())
		}
	case reflect.Pointer, reflect.Interface, reflect.Func, reflect.Chan:
		if rv.IsNil() {
			return slog.Attr{}
		}
	}
	return a
}

// logTextMax bounds a client's text in a log line: a refusal's field and
// message may hold a key, a name or a value as the client sent it, a
// megabyte of it, and the log is the operator's.
const logTextMax = 512

// clipped is s within logTextMax bytes, cut at a character's start and
// saying how long it was.
func clipped(s string) string {
	if len(s) <= logTextMax {
		return s
	}
	cut := logTextMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return fmt.Sprintf("%s… (%d bytes)", s[:cut], len(s))
}

// isNil reports whether v holds a nil pointer (a typed nil in an
// interface, which == nil does not catch).
func isNil(v any) bool {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface, reflect.Func, reflect.Chan:
		return rv.IsNil()
	}
	return false
}
