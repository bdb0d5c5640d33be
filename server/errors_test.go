package server

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/job"
)

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
