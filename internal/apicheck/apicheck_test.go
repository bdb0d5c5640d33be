package apicheck

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// answer is what the test server sends for one exchange.
type answer struct {
	status int
	ct     string
	body   string
}

// exchange sends one request through the checking transport to a server
// that answers a, reads the body as a client would (whole, or a line at
// a time up to the first result event), and returns what was reported.
func exchange(t *testing.T, method, path, reqBody string, a answer, readAll bool) []string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", a.ct)
		w.WriteHeader(a.status)
		_, _ = io.WriteString(w, a.body)
	}))
	defer srv.Close()
	d, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var got []string
	hc := &http.Client{Transport: d.Transport(http.DefaultTransport, func(err error) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, err.Error())
	})}
	defer hc.CloseIdleConnections()
	var body io.Reader
	if reqBody != "" {
		body = strings.NewReader(reqBody)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, srv.URL+path, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if readAll {
		_, _ = io.ReadAll(resp.Body)
	} else {
		// Read the first line only, then hang up as client.Stream does
		// after the result.
		buf := make([]byte, 1)
		for {
			if _, err := resp.Body.Read(buf); err != nil || buf[0] == '\n' {
				break
			}
		}
	}
	resp.Body.Close()
	mu.Lock()
	defer mu.Unlock()
	return got
}

const (
	job     = `{"runtime":"deno","source":"export default () => 1"}`
	result  = `{"id":"x","status":"ok","exit_code":0,"stdout":"","stderr":"","truncated":{"stdout":false,"stderr":false},"logs":[],"usage":{"wall_ms":1,"cpu_ms":1,"peak_memory_bytes":1,"broker_calls":0},"queued_ms":0,"warm":false}`
	badBody = `{"error":{"code":"invalid_job","message":"x"},"extra":1}`
)

func TestTransportChecks(t *testing.T) {
	for _, c := range []struct {
		name          string
		method, path  string
		req           string
		a             answer
		readAll       bool
		wantSubstring string // "" wants no report
	}{
		{"a result", "POST", "/v1/runs", job, answer{200, "application/json", result + "\n"}, true, ""},
		{"a result the client stops reading", "POST", "/v1/runs", job, answer{200, "application/json", result + "\n"}, false, ""},
		{"a stream", "POST", "/v1/runs", job, answer{200, NDJSON, `{"type":"stdout","data":"hi"}` + "\n" + `{"type":"result","result":` + result + "}\n"}, true, ""},
		{"a refusal", "POST", "/v1/runs", `{"runtime":"deno"}`, answer{400, "application/json", `{"error":{"code":"invalid_job","message":"no source","field":"source"}}`}, true, ""},
		{"an unknown path", "GET", "/v1/nope", "", answer{404, "application/json", `{"error":{"code":"not_found","message":"x"}}`}, true, ""},
		{"a wrong method", "GET", "/v1/runs", "", answer{405, "application/json", `{"error":{"code":"method_not_allowed","message":"x"}}`}, true, ""},
		{"metrics", "GET", "/metrics", "", answer{200, "text/plain; version=0.0.4", "x 1\n"}, true, ""},

		{"a result missing a member", "POST", "/v1/runs", job, answer{200, "application/json", `{"id":"x"}`}, true, "/v1/runs 200 application/json"},
		{"an undocumented member", "POST", "/v1/runs", `{}`, answer{400, "application/json", badBody}, true, "extra"},
		{"a bad event", "POST", "/v1/runs", job, answer{200, NDJSON, `{"type":"stdout"}` + "\n"}, true, "event 1"},
		{"a stream without its result", "POST", "/v1/runs", job, answer{200, NDJSON, `{"type":"stdout","data":"hi"}` + "\n"}, true, "without the result"},
		{"a refused request served", "POST", "/v1/runs", `{"runtime":"deno","source":"1","evil":1}`, answer{200, "application/json", result}, true, "refuses the request body"},
		{"an undocumented status", "GET", "/v1/health", "", answer{418, "application/json", `{}`}, true, "status 418"},
		{"an undocumented media type", "GET", "/v1/health", "", answer{200, "text/html", `<p>`}, true, `"text/html"`},
		{"an undocumented path served", "GET", "/v1/nope", "", answer{200, "application/json", `{}`}, true, "path /v1/nope"},
	} {
		got := exchange(t, c.method, c.path, c.req, c.a, c.readAll)
		switch {
		case c.wantSubstring == "" && len(got) > 0:
			t.Errorf("%s: reported %q", c.name, got)
		case c.wantSubstring != "" && (len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), c.wantSubstring)):
			t.Errorf("%s: reported %q, want a report with %q", c.name, got, c.wantSubstring)
		}
	}
}
