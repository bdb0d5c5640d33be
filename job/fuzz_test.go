package job

import (
	"errors"
	"strings"
	"testing"
)

// FuzzDecodeResolve: whatever a client sends, the daemon's first two steps
// neither panic nor fail with anything but a request error, and a job that
// decoded is refused, if at all, with the field at fault named (the
// client's answer carries it).
func FuzzDecodeResolve(f *testing.F) {
	for _, seed := range []string{
		`{"runtime":"deno","source":"console.log(1)"}`,
		`{"runtime":"python","source":"print(1)","input":{"a":[1,2]},"mode":"required","profile":"strict"}`,
		`{"runtime":"deno","source":"x","limits":{"memory":"64M","cpu_time":"1s","timeout":500,"pids":9,"output":"1K","tmp":"2M"}}`,
		`{"runtime":"deno","source":"x","capabilities":{"log":true,"request":{"urls":["https://a.example"],"methods":["POST"],"auth":{"https://a.example":"k"}}}}`,
		`{"runtime":"typescript","source":"x","limits":{"memory":1e400}}`,
		// Refused by Resolve, each at one field.
		`{"runtime":"cobol","source":"x"}`,
		`{"runtime":"deno","source":"x","mode":"often"}`,
		`{"runtime":"deno","source":"x","limits":{"memory":"1M"}}`,
		`{"runtime":"deno","source":"x","limits":{"pids":99999}}`,
		`{"runtime":"deno","source":"x","capabilities":{"request":{"urls":["ftp://a"]}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, err := Decode(strings.NewReader(string(data)))
		if err != nil {
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("%q: %v is not a request error", data, err)
			}
			return
		}
		_, err = Resolve(req, DefaultCeiling(), false)
		if err == nil {
			return
		}
		if !errors.Is(err, ErrInvalid) {
			t.Fatalf("%q: %v is not a request error", data, err)
		}
		if msg, field := Refusal(err); field == "" || !strings.HasPrefix(msg, field+": ") {
			t.Fatalf("%q: %q names no field (field %q)", data, msg, field)
		}
	})
}
