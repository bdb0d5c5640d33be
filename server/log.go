package server

import (
	"fmt"
	"io"
	"log/slog"
	"reflect"
	"sync"
	"time"
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

// refusalLog paces the log lines of refused requests, per peer uid. A
// client may send thousands of bad requests a second, each refused and
// counted (pmjail_requests_rejected_total); a line for each would spend
// the journal's rate limit, which then drops the daemon's other lines
// with them. A uid has refusalBurst lines at once, then refusalRate a
// second; its next line says how many it did not get ("suppressed").
type refusalLog struct {
	mu    sync.Mutex
	byUID map[uint32]*refusalPace
}

type refusalPace struct {
	bucket     *bucket
	suppressed int
}

const (
	refusalRate  = 1
	refusalBurst = 20
	// refusalUIDs bounds the uids remembered: past it, those whose
	// budget is whole again are forgotten (they would start whole).
	refusalUIDs = 4096
)

// refusalPaces is a uid's bucket: refusalBurst lines at once, refilled
// at refusalRate a second.
var refusalPaces = rate{n: refusalBurst, per: refusalBurst * time.Second / refusalRate}

// allow reports whether a refusal of uid's is logged now, and how many of
// its refusals were not since its last line.
func (l *refusalLog) allow(uid uint32, now time.Time) (ok bool, suppressed int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.byUID == nil {
		l.byUID = map[uint32]*refusalPace{}
	}
	p := l.byUID[uid]
	if p == nil {
		if len(l.byUID) >= refusalUIDs {
			for u, q := range l.byUID {
				if q.suppressed == 0 && q.bucket.whole(now) {
					delete(l.byUID, u)
				}
			}
		}
		p = &refusalPace{bucket: newBucket(refusalPaces)}
		l.byUID[uid] = p
	}
	if _, ok := p.bucket.take(now); !ok {
		p.suppressed++
		return false, 0
	}
	suppressed, p.suppressed = p.suppressed, 0
	return true, suppressed
}
