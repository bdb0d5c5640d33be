package server

import (
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
