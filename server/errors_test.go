package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/job"
)

// A client's malformed job names the field at fault where the decoder knows
// it, and no field where it does not.
func TestJobErrorNamesTheField(t *testing.T) {
	for _, tc := range []struct{ body, field string }{
		{`{"runtime":"deno","source":1}`, "source"},
		{`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":"https://a.example"}}}`, "capabilities.request.urls"},
		{`{"runtime":"deno","source":"1","sauce":"x"}`, "sauce"},
		{`{"runtime":"deno","source":"1","limits":{"lg":1}}`, "limits.lg"},
		{`{"runtime":"deno","source":"1","limits":{"memory":"lots"}}`, "limits.memory"},
		{`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":["https://a.example"],"metods":[]}}}`, "capabilities.request.metods"},
		{`[1]`, ""},
		{`{"runtime": "deno",`, ""},
		{`{bad`, ""},
	} {
		_, err := job.Decode(strings.NewReader(tc.body))
		if err == nil {
			t.Errorf("%s: decoded, want an error", tc.body)
			continue
		}
		if msg, field := jobErrorMessage(err); field != tc.field {
			t.Errorf("%s: %q: field %q, want %q", tc.body, msg, field, tc.field)
		}
	}
}

// A job over the cap is answered 413 whichever reader finds it: the HTTP
// body's limit, or job.Decode's own when the body's is not in front.
func TestTooLargeFromEitherReader(t *testing.T) {
	huge := strings.Repeat(" ", job.MaxRequestBytes+1)
	if _, err := job.Decode(strings.NewReader(huge)); !isTooLarge(err) {
		t.Errorf("job.Decode's own cap: %v is not too large", err)
	}
	body := http.MaxBytesReader(httptest.NewRecorder(), io.NopCloser(strings.NewReader(huge)), job.MaxRequestBytes)
	if _, err := job.Decode(body); !isTooLarge(err) {
		t.Errorf("the body's cap: %v is not too large", err)
	}
}
