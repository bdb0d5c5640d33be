package server

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// rawPost sends one request, as its bytes, on a new connection to sock,
// and returns the status and the error body: headers a Go client would
// merge or refuse to send go as written.
func rawPost(t *testing.T, sock, path, headers, body string) (int, api.ErrorBody) {
	t.Helper()
	return rawExchange(t, sock, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: pmjail\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", path, headers, len(body), body))
}

// Bad input on the wire is a 400 naming what is at fault, before
// anything runs or is stored.
//   - An Idempotency-Key given twice was taken, the first one counting: a
//     proxy that keyed on the last would deduplicate other submissions
//     than pmjail, and a sync run whose first key was empty ran with a
//     key the client believed made a retry safe.
//   - Text that is not UTF-8 was read as U+FFFD (and passed raw in the
//     input): the job that ran was not the bytes a proxy checked.
//   - A count of milliseconds whose nanoseconds overflow was wrapped
//     round to another duration, and a size spaced by a vertical tab
//     (which the OpenAPI document refuses) was taken.
//   - A batch's refusal said its field twice ("jobs[1].runtime: runtime:
//     unknown runtime").
func TestBadInputNamesTheField(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	job := `{"runtime": "deno", "source": "export default () => 1"}`
	for _, tc := range []struct {
		name, path, headers, body, field, msg string
	}{
		{"key twice, async", "/v1/runs", "Prefer: respond-async\r\nIdempotency-Key: a\r\nIdempotency-Key: b\r\n", job,
			api.IdempotencyKey, "the Idempotency-Key header is given 2 times: give it once"},
		{"key twice, sync, the first empty", "/v1/runs", "Idempotency-Key: \r\nIdempotency-Key: charge-42\r\n", job,
			api.IdempotencyKey, "the Idempotency-Key header is given 2 times: give it once"},
		{"key on a batch, the first empty", "/v1/batches", "Idempotency-Key: \r\nIdempotency-Key: b-1\r\n", `{"jobs": [` + job + `]}`,
			api.IdempotencyKey, "a batch takes no Idempotency-Key: submit runs one by one to give each a key"},
		{"source not UTF-8", "/v1/runs", "", "{\"runtime\": \"deno\", \"source\": \"export default () => '\xff'\"}",
			"source", "source: invalid UTF-8 (JSON text is UTF-8) (at byte 53)"},
		{"input not UTF-8, async", "/v1/runs", "Prefer: respond-async\r\n", "{\"runtime\": \"deno\", \"source\": \"1\", \"input\": {\"k\": \"\xc3\"}}",
			"input.k", "input.k: invalid UTF-8 (JSON text is UTF-8) (at byte 51)"},
		{"label in a batch not UTF-8", "/v1/batches", "", "{\"jobs\": [{\"runtime\": \"deno\", \"source\": \"1\", \"labels\": {\"t\": \"\xff\"}}]}",
			`jobs[0].labels.t`, `jobs[0].labels.t: invalid UTF-8 (JSON text is UTF-8) (at byte 62)`}, // the batch's raw jobs: a path as in input
		{"batch job refused", "/v1/batches", "", `{"jobs": [` + job + `, {"runtime": "cobol", "source": "1"}]}`,
			"jobs[1].runtime", `jobs[1].runtime: unknown runtime "cobol" (want one of deno, javascript, js, jsx, py, pyodide, python, ts, tsx, typescript)`},
		{"timeout whose nanoseconds overflow", "/v1/runs", "", `{"runtime": "deno", "source": "1", "limits": {"timeout": "288230376151716728"}}`, // read as 5s
			"limits.timeout", `limits.timeout: invalid duration "288230376151716728" (over 1099511627776 milliseconds, the largest)`},
		{"size with a space the document refuses", "/v1/runs", "", `{"runtime": "deno", "source": "1", "limits": {"memory": "\u000b64M"}}`,
			"limits.memory", `limits.memory: invalid size "\v64M" (want bytes or a number with K, M or G)`},
		{"input nested too deep", "/v1/runs", "", `{"runtime": "deno", "source": "1", "input": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`,
			"input", "malformed job JSON: input: nested deeper than 10000 arrays and objects (at byte 10043)"},
		{"input nested too deep in a batch", "/v1/batches", "", `{"jobs": [{"runtime": "deno", "source": "1", "input": ` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}]}`,
			"jobs[0]", "malformed batch JSON: jobs[0]: nested deeper than 10000 arrays and objects (at byte 10051)"},
		{"not JSON in a value", "/v1/runs", "", `{"runtime": "deno", "source": x}`,
			"source", "malformed job JSON: source: invalid character 'x' at start of value (at byte 30)"},
		{"batch limit refused", "/v1/batches", "", `{"jobs": [{"runtime": "deno", "source": "1", "limits": {"memory": "9G"}}]}`,
			"jobs[0].limits.memory", `jobs[0].limits.memory: 9G is above the ceiling of 1G`},
	} {
		status, eb := rawPost(t, sock, tc.path, tc.headers, tc.body)
		if status != http.StatusBadRequest || eb.Error.Code != "invalid_job" || eb.Error.Field != tc.field || eb.Error.Message != tc.msg {
			t.Errorf("%s: %d %+v, want 400 naming %q: %q", tc.name, status, eb.Error, tc.field, tc.msg)
		}
	}
	// A body that stalls is cut, and the answer says so: it said "read
	// job: read unix /path/of/the.sock->@: i/o timeout".
	for path, head := range map[string]string{"/v1/runs": "read job: the body stalled: 10 bytes came in ", "/v1/batches": "read batch: the body stalled: 10 bytes came in "} {
		status, eb := rawExchange(t, sock, fmt.Sprintf("POST %s HTTP/1.1\r\nHost: pmjail\r\nContent-Length: 100\r\n\r\n{\"jobs\": [", path))
		if status != http.StatusBadRequest || eb.Error.Code != "invalid_job" || !strings.HasPrefix(eb.Error.Message, head) ||
			!strings.HasSuffix(eb.Error.Message, "and a body must come at 256 KiB/s or faster after its first 1s (30s at most)") {
			t.Errorf("%s, a stalled body: %d %+v, want 400 saying it stalled", path, status, eb.Error)
		}
	}
	// A run id that is no id is not found, and not written back: the 404
	// said the whole path segment (a NUL, or a megabyte of it). A path
	// over the header cap is net/http's 431.
	if status, _ := rawExchange(t, sock, fmt.Sprintf("GET /v1/runs/%s HTTP/1.1\r\nHost: pmjail\r\n\r\n", strings.Repeat("a", 100000))); status != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("GET /v1/runs/ of 100,000 bytes: %d, want 431", status)
	}
	for _, id := range []string{strings.Repeat("a", 30000), "%00%ff", "0000000000000000x", "ABCDEF0123456789"} {
		status, eb := rawExchange(t, sock, fmt.Sprintf("GET /v1/runs/%s HTTP/1.1\r\nHost: pmjail\r\n\r\n", id))
		if status != http.StatusNotFound || eb.Error.Code != "not_found" || len(eb.Error.Message) > 100 {
			t.Errorf("GET /v1/runs/%.20s...: %d %.200q, want a short 404", id, status, eb.Error.Message)
		}
	}
	// Nothing of those ran or was stored.
	m, err := ts.c.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`pmjail_async_runs_total{event="submitted"} 0`, `pmjail_runs_total{runtime="deno",status="ok",tenant="others"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// rawExchange writes raw, a request as bytes, on a connection of its own to
// sock and returns the answer's status and error body.
func rawExchange(t *testing.T, sock, raw string) (int, api.ErrorBody) {
	t.Helper()
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, raw); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var eb api.ErrorBody
	_ = json.NewDecoder(resp.Body).Decode(&eb)
	return resp.StatusCode, eb
}

// A body sent with a Content-Encoding the daemon does not decode is
// refused, 415 naming the header: it was read as it came, so a job
// declared gzip-encoded ran as its bytes said, and a reader before
// pmjail that decodes the coding (a proxy checking jobs) read another
// job from the same bytes, or the refusal was a vague "malformed JSON"
// for the real gzip of a job. Identity is no coding.
func TestContentEncodingRefused(t *testing.T) {
	sock, store := asyncDirs(t)
	ts := startServerAt(t, fmt.Sprintf(`{"version": 1, "runs": {"dir": %q}}`, store), sock)
	job := `{"runtime": "deno", "source": "export default () => 1"}`
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write([]byte(job))
	_ = zw.Close()
	for _, tc := range []struct{ name, path, headers, body string }{
		{"plain JSON declared gzip", "/v1/runs", "Content-Encoding: gzip\r\n", job},
		{"the gzip of a job", "/v1/runs", "Content-Encoding: gzip\r\n", gz.String()},
		{"async, declared br", "/v1/runs", "Prefer: respond-async\r\nContent-Encoding: br\r\n", job},
		{"identity, then gzip", "/v1/runs", "Content-Encoding: identity\r\nContent-Encoding: gzip\r\n", job},
		{"a batch, declared deflate", "/v1/batches", "Content-Encoding: deflate\r\n", `{"jobs": [` + job + `]}`},
	} {
		status, eb := rawPost(t, sock, tc.path, tc.headers, tc.body)
		if status != http.StatusUnsupportedMediaType || eb.Error.Code != codeInvalid || eb.Error.Field != "Content-Encoding" ||
			!strings.Contains(eb.Error.Message, "does not decode") {
			t.Errorf("%s: %d %+v, want 415 naming Content-Encoding", tc.name, status, eb.Error)
		}
	}
	// Nothing of those ran or was stored.
	m, err := ts.c.Metrics(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`pmjail_async_runs_total{event="submitted"} 0`, `pmjail_runs_total{runtime="deno",status="ok",tenant="others"} 0`} {
		if !strings.Contains(m, want) {
			t.Errorf("after the refusals, the metrics lack %s", want)
		}
	}
	// Identity is the body as it is.
	if status, eb := rawPost(t, sock, "/v1/runs", "Content-Encoding: identity\r\n", job); status != http.StatusOK {
		t.Errorf("Content-Encoding: identity: %d %+v, want the run", status, eb.Error)
	}
}
