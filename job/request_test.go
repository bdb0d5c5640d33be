package job

import (
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
)

func TestDecodeRefusesBadJobs(t *testing.T) {
	cases := map[string]struct{ body, want string }{
		"malformed":       {`{"runtime": "deno",`, "malformed job JSON"},
		"unknown field":   {`{"runtime":"deno","source":"1","sauce":"x"}`, "sauce: unknown field"},
		"nested unknown":  {`{"runtime":"deno","source":"1","limits":{"lg":1}}`, "limits.lg: unknown field"},
		"repeated key":    {`{"runtime":"deno","source":"1","source":"2"}`, "source: duplicate key"},
		"case-folded key": {`{"runtime":"deno","Source":"1"}`, "Source: unknown field"},
		"trailing data":   {`{"runtime":"deno","source":"1"} {}`, "data after the JSON value"},
		"wrong type":      {`{"runtime":"deno","source":1}`, "source: want a string, got JSON number"},
		"not an object":   {`[{"runtime":"deno","source":"1"}]`, "malformed job JSON: want an object, got JSON array"},
		"wrong nesting":   {`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":"https://a.example"}}}`, "capabilities.request.urls: want an array, got JSON string"},
		"no runtime":      {`{"source":"1"}`, "runtime: missing"},
		"empty source":    {`{"runtime":"deno","source":""}`, "source: empty program"},
		"bad mode":        {`{"runtime":"deno","source":"1","mode":"sometimes"}`, `mode: "sometimes"`},
		"bad size":        {`{"runtime":"deno","source":"1","limits":{"memory":"12Q"}}`, `limits.memory: invalid size "12Q"`},
		"bad duration":    {`{"runtime":"deno","source":"1","limits":{"timeout":"-1s"}}`, `limits.timeout: invalid duration "-1s"`},
		"huge size":       {`{"runtime":"deno","source":"1","limits":{"memory":1e400}}`, "limits.memory: invalid size 1e400"},
		"duration type":   {`{"runtime":"deno","source":"1","limits":{"cpu_time":true}}`, "limits.cpu_time: invalid duration true"},
		"bad capability":  {`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":["ftp://x"]}}}`, "capabilities.request.urls[0]"},
		"oversize source": {`{"runtime":"deno","source":"` + strings.Repeat("x", MaxSourceBytes+1) + `"}`, "over the"},
	}
	notOneObject := map[string]bool{"malformed": true, "trailing data": true, "not an object": true}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			// As the daemon takes a job: Decode checks the JSON, Resolve
			// what it asks for.
			req, err := Decode(strings.NewReader(c.body))
			if err == nil {
				_, err = Resolve(req, DefaultCeiling(), false)
			}
			if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Decode and Resolve: %v, want an ErrInvalid containing %q", err, c.want)
			}
			// Only a body that is not one job object is called
			// malformed; a value at fault is named by its field.
			if whole := notOneObject[name]; strings.Contains(err.Error(), MalformedJSON) != whole {
				t.Fatalf("%v: says %q: %v, want %v", err, MalformedJSON, !whole, whole)
			}
		})
	}
	if _, err := Decode(strings.NewReader(strings.Repeat(" ", MaxRequestBytes+1))); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Fatalf("oversize body: %v", err)
	} else if !errors.Is(err, ErrInvalid) {
		t.Fatalf("oversize body: %v is not a request error", err)
	}
}

// The wire takes what its OpenAPI document allows and no other spelling:
// a runtime name in another case, a sized or timed limit with a sign, a
// point without a digit. A proxy that holds jobs to the schema refuses
// those; were the daemon to run them, it would run what the proxy let by
// under another name.
func TestDecodeRefusesOffSchemaSpellings(t *testing.T) {
	const (
		size = ` (want bytes or a number with K, M or G)`
		dur  = ` (want e.g. "2s", "500ms" or milliseconds)`
	)
	for _, tc := range []struct{ body, field, msg string }{
		{`{"runtime":"PyThOn","source":"1"}`, "runtime", `runtime: unknown runtime "PyThOn" (want one of deno, javascript, js, jsx, py, pyodide, python, ts, tsx, typescript)`},
		{`{"runtime":"DENO","source":"1"}`, "runtime", `runtime: unknown runtime "DENO" (want one of deno, javascript, js, jsx, py, pyodide, python, ts, tsx, typescript)`},
		{`{"runtime":"TypeScript","source":"1"}`, "runtime", `runtime: unknown runtime "TypeScript" (want one of deno, javascript, js, jsx, py, pyodide, python, ts, tsx, typescript)`},
		{`{"runtime":"TSX","source":"1"}`, "runtime", `runtime: unknown runtime "TSX" (want one of deno, javascript, js, jsx, py, pyodide, python, ts, tsx, typescript)`},
		{`{"runtime":"react","source":"1"}`, "runtime", `runtime: unknown runtime "react" (want one of deno, javascript, js, jsx, py, pyodide, python, ts, tsx, typescript)`},
		{`{"runtime":"deno","source":"1","limits":{"memory":"+64M"}}`, "limits.memory", `limits.memory: invalid size "+64M"` + size},
		{`{"runtime":"deno","source":"1","limits":{"output":"+1"}}`, "limits.output", `limits.output: invalid size "+1"` + size},
		{`{"runtime":"deno","source":"1","limits":{"tmp":"-0"}}`, "limits.tmp", `limits.tmp: invalid size "-0"` + size},
		{`{"runtime":"deno","source":"1","limits":{"timeout":"+1s"}}`, "limits.timeout", `limits.timeout: invalid duration "+1s"` + dur},
		{`{"runtime":"deno","source":"1","limits":{"timeout":"+1"}}`, "limits.timeout", `limits.timeout: invalid duration "+1"` + dur},
		{`{"runtime":"deno","source":"1","limits":{"cpu_time":"-0s"}}`, "limits.cpu_time", `limits.cpu_time: invalid duration "-0s"` + dur},
		{`{"runtime":"deno","source":"1","limits":{"cpu_time":"1.s"}}`, "limits.cpu_time", `limits.cpu_time: invalid duration "1.s"` + dur},
	} {
		req, err := Decode(strings.NewReader(tc.body))
		if err == nil {
			_, err = Resolve(req, DefaultCeiling(), false)
		}
		if err == nil {
			t.Errorf("%s: accepted, want %q at %q", tc.body, tc.msg, tc.field)
			continue
		}
		if msg, field := Refusal(err); !errors.Is(err, ErrInvalid) || field != tc.field || msg != tc.msg {
			t.Errorf("%s: %v (field %q), want %q at %q", tc.body, err, field, tc.msg, tc.field)
		}
	}
	// The names the document lists, as it spells them, still run; the
	// TypeScript ones strip types.
	for _, name := range runtimes.Names() {
		req, err := Decode(strings.NewReader(`{"runtime":"` + name + `","source":"1","limits":{"memory":" 64M ","timeout":"1.5s","cpu_time":"500"}}`))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := Resolve(req, DefaultCeiling(), false); err != nil {
			t.Errorf("%s: %v, want it resolved", name, err)
		}
	}
}

// TestDecodeOnlyDecodes: a job's content is checked in one place, Resolve,
// not once by Decode and again by Resolve.
func TestDecodeOnlyDecodes(t *testing.T) {
	req, err := Decode(strings.NewReader(`{"source":"1","mode":"sometimes"}`))
	if err != nil {
		t.Fatalf("Decode checked the job's content: %v", err)
	}
	if _, err := Resolve(req, DefaultCeiling(), false); err == nil || !strings.Contains(err.Error(), "runtime: missing") {
		t.Fatalf("Resolve: %v, want the job's content checked", err)
	}
}

// TestValidateInput: input given as it is (the CLI's --input) is held to
// what a decoded job's is: one JSON value, no key twice, the place named.
func TestValidateInput(t *testing.T) {
	for _, tc := range []struct{ input, field, msg string }{
		{`{"a":1,"a":2}`, "input.a", "input.a: duplicate key"},
		{`[{"b":{"c":1,"c":1}}]`, "input[0].b.c", "input[0].b.c: duplicate key"},
		{`{"a":1`, "input", "input: not valid JSON"},
		{`1 2`, "input", "input: not valid JSON"},
		// The CLI's --input is not decoded: its bytes would reach the
		// guest as they are.
		{"\"caf\xe9\"", "input", "input: invalid UTF-8 (JSON text is UTF-8) (at byte 4)"},
		{"{\"k\":\"caf\xe9\"}", `input.k`, "input.k: invalid UTF-8 (JSON text is UTF-8) (at byte 9)"},
		{`{"A":1,"a":2}`, "", ""},
	} {
		req := &Request{Runtime: "deno", Source: "1", Input: json.RawMessage(tc.input)}
		err := req.Validate()
		if tc.field == "" {
			if err != nil {
				t.Errorf("%s: %v, want it accepted (keys in the guest's own data are its own)", tc.input, err)
			}
			continue
		}
		if msg, field := Refusal(err); !errors.Is(err, ErrInvalid) || field != tc.field || msg != tc.msg {
			t.Errorf("%s: %v (field %q), want %q at %q", tc.input, err, field, tc.msg, tc.field)
		}
	}
}

func TestDecodeAndResolve(t *testing.T) {
	req, err := Decode(strings.NewReader(`{"runtime":"typescript","source":"export default () => 1","input":{"a":1},
		"capabilities":{"log":true},"limits":{"memory":"64M","timeout":2000}}`))
	if err != nil {
		t.Fatal(err)
	}
	r, err := Resolve(req, DefaultCeiling(), false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Runtime != "deno" || r.Mode != ModeAuto || r.Profile.Name != "default" {
		t.Fatalf("resolved %+v", r)
	}
	if r.Limits.Memory != 64<<20 || time.Duration(r.Limits.Timeout) != 2*time.Second {
		t.Fatalf("limits %+v: the job's own values must win", r.Limits)
	}
	def, _ := profiles.Load("default")
	if r.Limits.Pids != def.Limits.Pids || r.Limits.Output != def.Limits.Output {
		t.Fatalf("limits %+v: unset ones come from the profile %+v", r.Limits, def.Limits)
	}
}

func TestResolveAgainstTheCeiling(t *testing.T) {
	ceil := DefaultCeiling()
	ceil.Limits.Memory = 128 << 20
	ceil.Limits.Timeout = profiles.Duration(5 * time.Second)

	over := &Request{Runtime: "deno", Source: "1", Limits: profiles.Limits{Memory: 512 << 20}}
	if _, err := Resolve(over, ceil, false); err == nil || !strings.Contains(err.Error(), "limits.memory") {
		t.Fatalf("a job over the ceiling: %v, want an error naming limits.memory", err)
	}
	// Defaults the job leaves out are lowered to the ceiling, not refused.
	r, err := Resolve(&Request{Runtime: "deno", Source: "1"}, ceil, false)
	if err != nil {
		t.Fatal(err)
	}
	if r.Limits.Memory != 128<<20 || time.Duration(r.Limits.Timeout) != 5*time.Second {
		t.Fatalf("defaults not clamped to the ceiling: %+v", r.Limits)
	}

	ceil.Mode = ModeRequired
	if r, _ := Resolve(&Request{Runtime: "deno", Source: "1", Mode: ModeAuto}, ceil, false); r.Mode != ModeRequired {
		t.Fatalf("mode %q: the operator's required must win", r.Mode)
	}
	ceil.Runtimes = nil
	ceil.Runtimes = append(ceil.Runtimes, "deno")
	if _, err := Resolve(&Request{Runtime: "python", Source: "1"}, ceil, false); err == nil || !strings.Contains(err.Error(), "not enabled") {
		t.Fatalf("a disabled runtime: %v", err)
	}
	if _, err := Resolve(&Request{Runtime: "deno", Source: "1", Profile: "/etc/x.json"}, ceil, false); err == nil || !strings.Contains(err.Error(), "built-in profile names") {
		t.Fatalf("a profile file from an untrusted request: %v", err)
	}
	if _, err := Resolve(&Request{Runtime: "cobol", Source: "1"}, DefaultCeiling(), false); err == nil || !strings.Contains(err.Error(), "unknown runtime") {
		t.Fatalf("unknown runtime: %v", err)
	}
}

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
		// A key twice, or in the wrong case: what runs would depend on
		// which of two readings wins.
		{`{"runtime":"deno","source":"1","source":"2"}`, "source"},
		{`{"runtime":"deno","source":"1","limits":{"pids":4,"pids":400}}`, "limits.pids"},
		{`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":["https://a.example"],"auth":{"https://a.example":"k","https://a.example":"j"}}}}`, `capabilities.request.auth["https://a.example"]`},
		{`{"runtime":"deno","source":"1","input":{"a":1,"a":2}}`, "input.a"},
		{`{"RUNTIME":"deno","source":"1"}`, "RUNTIME"},
		{`{"runtime":"deno","Source":"1"}`, "Source"},
		{`{"runtime":"deno","source":"1","Source":"2"}`, "Source"},
		{`{"runtime":"deno","source":"1","limits":{"Memory":"1G"}}`, "limits.Memory"},
		// Not UTF-8: read as U+FFFD by one reader, refused or kept as
		// bytes by another (the input reached the guest as it was).
		{"{\"runtime\":\"deno\",\"source\":\"export default () => '\xff'\"}", "source"},
		{"{\"runtime\":\"deno\",\"source\":\"1\",\"labels\":{\"team\":\"\xc3\"}}", `labels["team"]`},
		{"{\"runtime\":\"deno\",\"source\":\"1\",\"input\":{\"a\":[\"\xff\"]}}", "input.a[0]"},
		{"{\"runtime\":\"deno\",\"files\":{\"main.ts\":\"1\",\"\xff.ts\":\"2\"}}", "files"},
		{"{\"runtime\":\"deno\",\"source\":\"1\",\"env\":{\"A\":\"\xed\xa0\x80\"}}", `env["A"]`},
		// A null for a string of a map: it was the empty string (an env
		// name set, an empty file), where a reader before pmjail, and the
		// schema, take it for none.
		{`{"runtime":"deno","source":"1","env":{"A":null}}`, `env["A"]`},
		{`{"runtime":"deno","source":"1","labels":{"team":null}}`, `labels["team"]`},
		{`{"runtime":"deno","files":{"main.ts":"1","lib/u.ts":null}}`, `files["lib/u.ts"]`},
		{`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":["https://a.example"],"auth":{"https://a.example":null}}}}`, `capabilities.request.auth["https://a.example"]`},
		// Not JSON: the place the decoder found it so, where it has one;
		// input nested too deep, the input (not a path 10,000 deep).
		{`{"runtime":"deno","source": x}`, "source"},
		{`{"runtime":"deno","source":"1","input":{"a":[1,}}`, "input.a[1]"},
		{`{"runtime":"deno","source":"1","input":` + strings.Repeat("[", 10001) + strings.Repeat("]", 10001) + `}`, "input"},
		{`{"runtime":"deno","source":"1","input":{"a":` + strings.Repeat(`{"b":`, 20000), "input"},
		{`[1]`, ""},
		{`{"runtime": "deno",`, ""},
		{`{bad`, ""},
	} {
		_, err := Decode(strings.NewReader(tc.body))
		if err == nil {
			t.Errorf("%s: decoded, want an error", tc.body)
			continue
		}
		if msg, field := Refusal(err); field != tc.field {
			t.Errorf("%s: %q: field %q, want %q", tc.body, msg, field, tc.field)
		}
	}
}

// Every refusal of a decoded job names its field as a *strictjson.Error in
// the chain, never by the message's head alone, and keeps that head.
func TestResolveRefusalNamesTheField(t *testing.T) {
	ceil := DefaultCeiling()
	ceil.Runtimes = []runtimes.Name{runtimes.Deno}
	ceil.Profiles = []string{"default"}
	ceil.Broker = ipc.Ceiling{AllowRequest: true, Origins: []string{"https://a.example"}, Methods: []string{"GET"}}
	caps := func(s string) ipc.Capabilities {
		var c ipc.Capabilities
		if err := json.Unmarshal([]byte(s), &c); err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		req   Request
		field string
	}{
		{Request{Source: "1"}, "runtime"},
		{Request{Runtime: "cobol", Source: "1"}, "runtime"},
		{Request{Runtime: "python", Source: "1"}, "runtime"},
		{Request{Runtime: "deno"}, "source"},
		{Request{Runtime: "deno", Source: strings.Repeat("x", MaxSourceBytes+1)}, "source"},
		{Request{Runtime: "deno", Source: "1", Input: json.RawMessage(`{`)}, "input"},
		{Request{Runtime: "deno", Source: "1", Mode: "sometimes"}, "mode"},
		{Request{Runtime: "deno", Source: "1", Profile: "/etc/x.json"}, "profile"},
		{Request{Runtime: "deno", Source: "1", Profile: "strict"}, "profile"},
		{Request{Runtime: "deno", Source: "1", Limits: profiles.Limits{Memory: 1 << 20}}, "limits.memory"},
		{Request{Runtime: "deno", Source: "1", Limits: profiles.Limits{Pids: 1 << 20}}, "limits.pids"},
		{Request{Runtime: "deno", Source: "1", Capabilities: caps(`{"log": true}`)}, "capabilities.log"},
		{Request{Runtime: "deno", Source: "1", Capabilities: caps(`{"request": {"urls": []}}`)}, "capabilities.request.urls"},
		{Request{Runtime: "deno", Source: "1", Capabilities: caps(`{"request": {"urls": ["https://b.example"]}}`)}, "capabilities.request.urls[0]"},
		{Request{Runtime: "deno", Source: "1", Capabilities: caps(`{"request": {"urls": ["https://a.example"], "methods": ["GET", "PUT"]}}`)}, "capabilities.request.methods[1]"},
		{Request{Runtime: "deno", Source: "1", Capabilities: caps(`{"request": {"urls": ["https://a.example"], "auth": {"https://a.example": "k"}}}`)}, `capabilities.request.auth["https://a.example"]`},
	} {
		_, err := Resolve(&tc.req, ceil, false)
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%+v: %v, want a request error", tc.req.Limits, err)
			continue
		}
		msg, field := Refusal(err)
		if field != tc.field || !strings.HasPrefix(msg, tc.field+": ") {
			t.Errorf("%q: field %q, want %q heading the message", msg, field, tc.field)
		}
	}
	// A message that only looks like it starts with a field names none.
	if _, field := Refusal(fmt.Errorf("%w: source: made up", ErrInvalid)); field != "" {
		t.Errorf("field %q read from a message", field)
	}
}

// Only a Deno program is type-checked; asking for it elsewhere is the
// job's error, named.
func TestValidateTypeCheck(t *testing.T) {
	for _, req := range []Request{
		{Runtime: "python", Source: "1", TypeCheck: true},
		{Exec: &Exec{Program: "/bin/true"}, TypeCheck: true},
	} {
		err := req.Validate()
		msg, field := Refusal(err)
		if !errors.Is(err, ErrInvalid) || field != "typecheck" || msg != "typecheck: only a Deno program (runtime deno, typescript, jsx or tsx) is type-checked" {
			t.Errorf("%s typecheck: %v (field %q)", req.Runtime, err, field)
		}
	}
	for _, rt := range []string{"deno", "typescript", "ts"} {
		if err := (&Request{Runtime: rt, Source: "1", TypeCheck: true}).Validate(); err != nil {
			t.Errorf("%s typecheck: %v", rt, err)
		}
	}
}

// A null elsewhere is as before: the job's own fields left out, and
// anything in the input, which is the guest's, maps of it included.
func TestDecodeNullsOutsideTheMaps(t *testing.T) {
	for _, body := range []string{
		`{"runtime":"deno","source":"null","env":null,"labels":null,"mode":null,"capabilities":null}`,
		`{"runtime":"deno","source":"1","input":{"env":{"A":null},"files":{"x":null}}}`,
		`{"input":{"labels":{"a":null}},"runtime":"deno","source":"1"}`,
		`{"runtime":"deno","source":"1","input":[null,{"input":null}],"env":{"A":"null"}}`,
	} {
		if _, err := Decode(strings.NewReader(body)); err != nil {
			t.Errorf("%s: %v", body, err)
		}
	}
}

// A job's lists and maps are bounded as the body is read, before any
// entry is kept: decoded, a body of the largest size holding empty
// strings was a million-entry []string, a hundred MiB for a few MiB of
// body. Each list's own cap names it once decoded.
func TestDecodeBoundsEntries(t *testing.T) {
	many := func(n int, item string) string {
		return strings.TrimSuffix(strings.Repeat(item+",", n), ",")
	}
	cases := map[string]struct{ body, field, want string }{
		"urls while read": {`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":[` + many(maxEntries+1, `""`) + `]}}}`,
			"capabilities.request.urls", fmt.Sprintf("capabilities.request.urls: more than %d entries", maxEntries)},
		"env while read": {`{"runtime":"deno","source":"1","env":{` + manyMembers(maxEntries+1) + `}}`,
			"env", fmt.Sprintf("env: more than %d entries", maxEntries)},
		"urls decoded": {`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":[` + many(api.MaxOrigins+1, `"https://a.example"`) + `]}}}`,
			"capabilities.request.urls", fmt.Sprintf("capabilities.request.urls: %d origins is over the cap of %d", api.MaxOrigins+1, api.MaxOrigins)},
		"methods decoded": {`{"runtime":"deno","source":"1","capabilities":{"request":{"urls":["https://a.example"],"methods":[` + many(api.MaxMethods+1, `"GET"`) + `]}}}`,
			"capabilities.request.methods", fmt.Sprintf("capabilities.request.methods: %d methods is over the cap of %d", api.MaxMethods+1, api.MaxMethods)},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			req, err := Decode(strings.NewReader(c.body))
			if err == nil {
				err = req.Validate()
			}
			if err == nil {
				t.Fatalf("taken, want %q naming %q", c.want, c.field)
			}
			msg, field := Refusal(err)
			if !errors.Is(err, ErrInvalid) || field != c.field || msg != c.want {
				t.Fatalf("got %v (field %q), want %q naming %q", err, field, c.want, c.field)
			}
		})
	}
	// The input is the guest's data, whatever it holds.
	body := `{"runtime":"deno","source":"1","input":[` + many(4*maxEntries, `""`) + `]}`
	if _, err := Decode(strings.NewReader(body)); err != nil {
		t.Fatalf("a long list in the input: %v", err)
	}

	// What reading the largest body of empty strings allocates: the
	// read's buffer, grown as the body comes, is most of it (~5.5 times
	// the body); decoding it whole was ~35 times.
	big := `{"runtime":"deno","source":"1","capabilities":{"request":{"urls":[` + many((MaxRequestBytes-200)/3, `""`) + `]}}}`
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Decode(strings.NewReader(big))
	runtime.ReadMemStats(&after)
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("the largest body of empty strings: %v", err)
	}
	if got := after.TotalAlloc - before.TotalAlloc; got > 8*uint64(len(big)) {
		t.Errorf("reading a %d-byte body of empty strings allocated %d bytes, want at most 8 times the body", len(big), got)
	}
}

// manyMembers is n members of a JSON object, named V0, V1, ...
func manyMembers(n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `"V%d":"1"`, i)
	}
	return b.String()
}
