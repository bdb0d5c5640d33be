package api_test

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/apicheck"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
	"github.com/pmjail/pmjail/server"
)

// direction says which way a type's values cross the socket: decoded
// from what a client or operator wrote (a member may be left out whatever
// its Go tag), or encoded by the daemon (a member without omitempty is
// always there, so the schema must require it).
type direction int

const (
	in direction = iota
	out
)

// wireTypes is every Go type whose JSON crosses the socket (or is the
// daemon's config file), with the schema that describes it. Repoint a row
// when a type moves; add one when a new body appears.
var wireTypes = []struct {
	schema string
	typ    reflect.Type
	dir    direction
}{
	{"Job", reflect.TypeFor[api.Job](), in},
	// The daemon decodes a job as the engine's Request, not as api.Job:
	// it must read the same members.
	{"Job", reflect.TypeFor[job.Request](), in},
	{"Result", reflect.TypeFor[api.Result](), out},
	{"Event", reflect.TypeFor[api.Event](), out},
	{"Health", reflect.TypeFor[api.Health](), out},
	{"ErrorBody", reflect.TypeFor[api.ErrorBody](), out},
	{"Posture", reflect.TypeFor[api.Posture](), out},
	{"Config", reflect.TypeFor[server.Config](), in},
	{"Run", reflect.TypeFor[api.Run](), out},
	{"Batch", reflect.TypeFor[api.Batch](), in},
	{"BatchRuns", reflect.TypeFor[api.BatchRuns](), out},
}

// named are the Go types with a JSON form of their own (a marshaler, or
// a raw value) and the schema each must be written as.
var named = map[reflect.Type]string{
	reflect.TypeFor[api.Size]():          "#/components/schemas/Size",
	reflect.TypeFor[api.Duration]():      "#/components/schemas/Duration",
	reflect.TypeFor[api.Time]():          "#/components/schemas/Time",
	reflect.TypeFor[profiles.Size]():     "#/components/schemas/Size",
	reflect.TypeFor[profiles.Duration](): "#/components/schemas/Duration",
	reflect.TypeFor[json.RawMessage]():   "#/components/schemas/JSON",
}

func load(t *testing.T) *apicheck.Doc {
	t.Helper()
	d, err := apicheck.Load()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// TestOpenAPIMatchesGoTypes holds the document's schemas to the Go types,
// member for member, both ways: a Go field the schema lacks, a schema
// property no Go field has, a type that differs, a required member the
// Go type may leave out, or one it always writes that the schema does not
// require.
func TestOpenAPIMatchesGoTypes(t *testing.T) {
	d := load(t)
	for _, w := range wireTypes {
		for _, p := range drift(d, w.typ, "#/components/schemas/"+w.schema, w.dir) {
			t.Errorf("%s (%v): %s", w.schema, w.typ, p)
		}
	}
}

// TestOpenAPIDriftFails shows the check above failing, in each
// direction: a field added to the Go type, and a field the Go type
// lacks.
func TestOpenAPIDriftFails(t *testing.T) {
	d := load(t)
	type grown struct {
		api.Health
		Extra string `json:"extra"`
	}
	if p := drift(d, reflect.TypeFor[grown](), "#/components/schemas/Health", out); !contains(p, `"extra"`) {
		t.Errorf("a Go field the schema lacks was not found: %q", p)
	}
	type shrunk struct {
		Status string `json:"status"`
	}
	if p := drift(d, reflect.TypeFor[shrunk](), "#/components/schemas/Health", out); !contains(p, `"pid"`) {
		t.Errorf("a schema property the Go type lacks was not found: %q", p)
	}
	type retyped struct {
		api.Health
		PID string `json:"pid"`
	}
	if p := drift(d, reflect.TypeFor[retyped](), "#/components/schemas/Health", out); !contains(p, `pid`) {
		t.Errorf("a Go field of another type was not found: %q", p)
	}
	type optional struct {
		api.Health
		PID int `json:"pid,omitempty"`
	}
	if p := drift(d, reflect.TypeFor[optional](), "#/components/schemas/Health", out); !contains(p, `"pid"`) {
		t.Errorf("a required member the Go type may leave out was not found: %q", p)
	}
}

func contains(problems []string, s string) bool {
	return slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, s) })
}

// TestOpenAPISchemasCompile compiles every schema of the document as JSON
// Schema 2020-12, which also resolves every $ref in them.
func TestOpenAPISchemasCompile(t *testing.T) {
	d := load(t)
	schemas, _, err := d.Lookup("#/components/schemas")
	if err != nil {
		t.Fatal(err)
	}
	for name := range schemas.(map[string]any) {
		if _, err := d.Schema(apicheck.Pointer("#/components/schemas", name)); err != nil {
			t.Error(err)
		}
	}
}

// TestOpenAPIEnums holds the document's lists of names to the Go lists.
func TestOpenAPIEnums(t *testing.T) {
	d := load(t)
	var statuses []string
	for _, s := range api.Statuses() {
		statuses = append(statuses, string(s))
	}
	for _, c := range []struct {
		ptr  string
		want []string
	}{
		{"#/components/schemas/Status/enum", statuses},
		{"#/components/schemas/Event/properties/type/enum", []string{api.EventStdout, api.EventStderr, api.EventLog, api.EventResult}},
		{"#/components/schemas/Layer/properties/state/enum", []string{string(api.StateApplied), string(api.StateMissing), string(api.StateDegraded), string(api.StateOff)}},
		{"#/components/schemas/Job/properties/mode/enum", []string{"", api.ModeAuto, api.ModeRequired}},
		{"#/components/schemas/Job/properties/runtime/enum", runtimes.Names()},
		{"#/components/schemas/Job/properties/posture/enum", []string{"", api.PostureFull, api.PostureSummary}},
		{"#/components/schemas/ErrorDetail/properties/code/enum", []string{api.CodeInvalidJob, api.CodeTooLarge, api.CodeForbidden,
			api.CodeRefreshForbidden, api.CodeQueueFull, api.CodeRateLimited, api.CodeQueueTimeout, api.CodeDraining,
			api.CodeNotFound, api.CodeMethodNotAllowed, api.CodeBusy, api.CodeIdempotencyConflict, api.CodeAsyncUnavailable}},
		{"#/components/schemas/Run/properties/status/enum", []string{string(api.RunQueued), string(api.RunRunning), string(api.RunDone), string(api.RunCancelled)}},
		{"#/components/schemas/Config/properties/others/enum", []string{"", server.OthersAllow, server.OthersRefuse}},
		{"#/components/schemas/Labels/maxProperties", []string{fmt.Sprint(api.MaxLabels)}},
		{"#/components/schemas/RequestCapability/properties/urls/maxItems", []string{fmt.Sprint(api.MaxOrigins)}},
		{"#/components/schemas/RequestCapability/properties/methods/maxItems", []string{fmt.Sprint(api.MaxMethods)}},
		{"#/components/schemas/RequestCapability/properties/auth/maxProperties", []string{fmt.Sprint(api.MaxOrigins)}},
		{"#/components/schemas/Labels/additionalProperties/maxLength", []string{fmt.Sprint(api.LabelValueMax)}},
		{"#/components/schemas/Health/properties/api/const", []string{api.APIVersion}},
	} {
		v, _, err := d.Lookup(c.ptr)
		if err != nil {
			t.Error(err)
			continue
		}
		got := strings.Fields(strings.Trim(fmt.Sprint(v), "[]"))
		if !slices.Equal(sorted(got), sorted(c.want)) && !(len(c.want) == 1 && fmt.Sprint(v) == c.want[0]) {
			t.Errorf("%s is %v, the Go code has %v", c.ptr, v, c.want)
		}
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	sort.Strings(s)
	return slices.DeleteFunc(s, func(x string) bool { return x == "" })
}

// drift lists where the Go type t and the schema at ptr disagree.
func drift(d *apicheck.Doc, t reflect.Type, ptr string, dir direction) []string {
	c := &checker{d: d, dir: dir, seen: map[string]bool{}}
	c.check(t, ptr, ptr)
	return c.problems
}

type checker struct {
	d        *apicheck.Doc
	dir      direction
	seen     map[string]bool // type@pointer pairs checked, against cycles
	problems []string
}

func (c *checker) fail(at, format string, args ...any) {
	c.problems = append(c.problems, at+": "+fmt.Sprintf(format, args...))
}

// check compares t with the schema at ptr; at names the place for
// messages (the JSON path from the top type).
func (c *checker) check(t reflect.Type, ptr, at string) {
	raw, err := c.d.At(ptr)
	if err != nil {
		c.fail(at, "%v", err)
		return
	}
	sch, _ := raw.(map[string]any)
	if sch == nil {
		c.fail(at, "the schema at %s is not an object", ptr)
		return
	}
	pointer := t.Kind() == reflect.Pointer
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if want, ok := named[t]; ok {
		if ref, _ := sch["$ref"].(string); ref != want {
			c.fail(at, "%v is written as %s, the schema is %v", t, want, sch)
		}
		return
	}
	if ref, ok := sch["$ref"].(string); ok {
		c.check(t, ref, at)
		return
	}
	// A nullable reference ({"oneOf": [{"$ref"}, {"type": "null"}]}) is the
	// reference, for a Go type that can be nil.
	if alt, ok := sch["oneOf"].([]any); ok && len(alt) == 2 {
		for i, a := range alt {
			if m, _ := a.(map[string]any); m["type"] == "null" {
				c.check(t, apicheck.Pointer(ptr, "oneOf", fmt.Sprint(1-i)), at)
				return
			}
		}
	}
	key := t.String() + "@" + ptr
	if c.seen[key] {
		return
	}
	c.seen[key] = true

	types := schemaTypes(sch)
	nilable := pointer
	var want string
	switch t.Kind() {
	case reflect.Struct:
		if t == reflect.TypeFor[time.Time]() {
			want = "string"
			if sch["format"] != "date-time" {
				c.fail(at, "a time is written as RFC 3339: want format date-time")
			}
			break
		}
		want = "object"
	case reflect.Map:
		want, nilable = "object", true
	case reflect.Slice:
		want, nilable = "array", true
	case reflect.Array:
		want = "array"
	case reflect.String:
		want = "string"
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
	case reflect.Float32, reflect.Float64:
		want = "number"
	case reflect.Interface:
		c.fail(at, "Go %v holds any JSON: type the field, so that the schema can be held to it", t)
		return
	default:
		c.fail(at, "Go kind %v has no JSON form", t.Kind())
		return
	}
	if !slices.Contains(types, want) {
		c.fail(at, "Go %v is a JSON %s, the schema says %v", t, want, types)
	}
	if slices.Contains(types, "null") && !nilable {
		c.fail(at, "the schema allows null, Go %v cannot be null", t)
	}
	switch {
	case t.Kind() == reflect.Map:
		if t.Key().Kind() != reflect.String {
			c.fail(at, "map key %v is not a string", t.Key())
		}
		if _, ok := sch["additionalProperties"].(map[string]any); !ok {
			c.fail(at, "a map's schema needs additionalProperties")
			return
		}
		c.check(t.Elem(), apicheck.Pointer(ptr, "additionalProperties"), at+"[*]")
	case t.Kind() == reflect.Slice || t.Kind() == reflect.Array:
		if _, ok := sch["items"].(map[string]any); !ok {
			c.fail(at, "an array's schema needs items")
			return
		}
		c.check(t.Elem(), apicheck.Pointer(ptr, "items"), at+"[]")
	case want == "object":
		c.object(t, sch, ptr, at)
	}
}

// object compares a struct's JSON members with the schema's properties.
func (c *checker) object(t reflect.Type, sch map[string]any, ptr, at string) {
	props, _ := sch["properties"].(map[string]any)
	if sch["additionalProperties"] != false {
		c.fail(at, "the schema of %v does not refuse unknown members (additionalProperties: false)", t)
	}
	var required []string
	if r, ok := sch["required"].([]any); ok {
		for _, x := range r {
			required = append(required, fmt.Sprint(x))
		}
	}
	fields := jsonFields(t)
	for _, f := range fields {
		if _, ok := props[f.name]; !ok {
			c.fail(at, "Go field %v.%s (JSON %q) is not in the schema", t, f.goName, f.name)
			continue
		}
		req := slices.Contains(required, f.name)
		switch {
		case f.optional && req:
			c.fail(at, "%q is required, but Go %v.%s may leave it out (omitempty)", f.name, t, f.goName)
		case c.dir == out && !f.optional && !req:
			c.fail(at, "%q is always written by Go %v.%s, the schema does not require it", f.name, t, f.goName)
		}
		c.check(f.typ, apicheck.Pointer(ptr, "properties", f.name), at+"."+f.name)
	}
	for name := range props {
		if !slices.ContainsFunc(fields, func(f field) bool { return f.name == name }) {
			c.fail(at, "schema property %q is not a JSON member of Go %v", name, t)
		}
	}
	for _, name := range required {
		if _, ok := props[name]; !ok {
			c.fail(at, "required %q is not a property", name)
		}
	}
}

// schemaTypes is a schema's "type", as a list.
func schemaTypes(sch map[string]any) []string {
	switch v := sch["type"].(type) {
	case string:
		return []string{v}
	case []any:
		var ts []string
		for _, x := range v {
			ts = append(ts, fmt.Sprint(x))
		}
		return ts
	}
	return nil
}

type field struct {
	name, goName string
	typ          reflect.Type
	optional     bool
}

// jsonFields lists a struct's JSON members as encoding/json sees them:
// exported fields, by tag name, embedded structs without a tag flattened,
// "-" left out.
func jsonFields(t reflect.Type) []field {
	var fs []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag, hasTag := sf.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if sf.Anonymous && !hasTag {
			et := sf.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for _, f := range jsonFields(et) {
					// An outer field of the same name wins, as in encoding/json.
					if !slices.ContainsFunc(fs, func(g field) bool { return g.name == f.name }) &&
						!outerHas(t, f.name) {
						fs = append(fs, f)
					}
				}
				continue
			}
		}
		if !sf.IsExported() {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		optional := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		fs = slices.DeleteFunc(fs, func(g field) bool { return g.name == name })
		fs = append(fs, field{name: name, goName: sf.Name, typ: sf.Type, optional: optional})
	}
	return fs
}

// outerHas reports whether t declares a non-embedded field named name in
// JSON.
func outerHas(t reflect.Type, name string) bool {
	for i := range t.NumField() {
		sf := t.Field(i)
		if sf.Anonymous || !sf.IsExported() {
			continue
		}
		n, _, _ := strings.Cut(sf.Tag.Get("json"), ",")
		if n == "" {
			n = sf.Name
		}
		if n == name {
			return true
		}
	}
	return false
}

// manyLabels is a labels object of n members.
func manyLabels(n int) string {
	m := map[string]string{}
	for i := range n {
		m[fmt.Sprint("k", i)] = "v"
	}
	b, _ := json.Marshal(m)
	return string(b)
}

// TestOpenAPIAgreesWithDecoders feeds the same bodies to the schemas and
// to the Go decoders: each schema answers as the table says, and what a
// decoder accepts the schema accepts (the schema may refuse less: a
// ceiling, a secret's file, are beyond it).
func TestOpenAPIAgreesWithDecoders(t *testing.T) {
	d := load(t)
	example, err := os.ReadFile("../deploy/config.example.json")
	if err != nil {
		t.Fatal(err)
	}
	parseJob := func(b string) error {
		// As the daemon takes a job, under the most generous ceiling: the
		// runtime's name is checked by Resolve.
		req, err := job.Decode(strings.NewReader(b))
		if err != nil {
			return err
		}
		_, err = job.Resolve(req, job.DefaultCeiling(), false)
		return err
	}
	parseConfig := func(b string) error {
		_, err := server.ParseConfig(strings.NewReader(b))
		return err
	}
	for _, c := range []struct {
		schema string
		parse  func(string) error
		body   string
		valid  bool
	}{
		{"Job", parseJob, `{"runtime":"deno","source":"export default () => 1"}`, true},
		{"Job", parseJob, `{"runtime":"python","source":"1","input":{"n":[1,2]},"mode":"required","profile":"strict",
			"limits":{"memory":"128M","cpu_time":"5s","timeout":30000,"pids":32,"output":1048576,"tmp":"16Mi"},
			"capabilities":{"log":true,"request":{"urls":["https://api.example.com"],"methods":["GET","POST"],"auth":{"https://api.example.com":"k"}}}}`, true},
		{"Job", parseJob, `{"runtime":"deno","source":"1","evil":true}`, false},
		{"Job", parseJob, `{"runtime":"deno"}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","mode":"sometimes"}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"memory":"lots"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"timeout":"-1s"}}`, false},
		{"Job", parseJob, `{"runtime":"PyThOn","source":"1"}`, false},
		{"Job", parseJob, `{"runtime":"DENO","source":"1"}`, false},
		{"Job", parseJob, `{"runtime":"ts","source":"1","limits":{"memory":" 64Mi ","timeout":".5s","cpu_time":"1500"}}`, true},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"memory":"+64M"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"tmp":"-0"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"timeout":"+1s"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"timeout":"+1000"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","limits":{"timeout":"1.s"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","capabilities":{"request":{"urls":["https://a.example"],"methods":["BREW"]}}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":{"team":"ci","build.id":"4-2_a"},"posture":"summary"}`, true},
		{"Job", parseJob, `{"runtime":"deno","source":"1","posture":"full"}`, true},
		{"Job", parseJob, `{"runtime":"deno","source":"1","posture":"brief"}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":{"Team":"ci"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":{"":"x"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":{"` + strings.Repeat("k", api.LabelKeyMax+1) + `":"x"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":{"k":"` + strings.Repeat("v", api.LabelValueMax+1) + `"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":` + manyLabels(api.MaxLabels+1) + `}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":` + manyLabels(api.MaxLabels) + `}`, true},
		{"Job", parseJob, `{"runtime":"deno","source":"1","labels":{"k":1}}`, false},
		{"Job", parseJob, `{"runtime":"ts","files":{"main.ts":"import './lib/u.ts'","lib/u.ts":"1"}}`, true},
		{"Job", parseJob, `{"runtime":"python","files":{"app.py":"import util","util.py":"1"},"entry":"app.py","stdin":"AAEC","stdin_encoding":"base64","env":{"GREETING":"hi","_x1":""}}`, true},
		{"Job", parseJob, `{"runtime":"deno","source":"1","files":{"main.js":"1"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":"1","../x.js":"2"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":"1","a/./x.js":"2"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":"1","/etc/x.js":"2"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":"1","a//x.js":"2"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":"1","a\nb":"2"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":"1","..x/.y.js":"2","a..b/c":"3"}}`, true},
		{"Job", parseJob, `{"runtime":"deno","files":{"main.js":1}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","stdin_encoding":"hex"}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","env":{"1X":"v"}}`, false},
		{"Job", parseJob, `{"runtime":"deno","source":"1","env":{"X":"` + strings.Repeat("v", api.MaxEnvValueLen+1) + `"}}`, false},
		{"Config", parseConfig, string(example), true},
		{"Config", parseConfig, `{"version":1}`, true},
		{"Config", parseConfig, `{"version":1,"max_queue":-1,"prestart":-1,"queue_timeout":500,"ceiling":{"capabilities":{"log":null,"request":null}}}`, true},
		{"Config", parseConfig, `{"version":2}`, false},
		{"Config", parseConfig, `{}`, false},
		{"Config", parseConfig, `{"version":1,"socket":{"mode":"rw"}}`, false},
		{"Config", parseConfig, `{"version":1,"ceiling":{"limits":{"memory":"1T"}}}`, false},
		{"Config", parseConfig, `{"version":1,"log_level":"loud"}`, false},
		{"Config", parseConfig, `{"version":1,"log_level":"WARN","socket":{"mode":"660"}}`, true},
		{"Config", parseConfig, `{"version":1,"unknown":1}`, false},
		{"Config", parseConfig, `{"version":1,"metrics":{"listen":"127.0.0.1:9464"}}`, true},
		{"Config", parseConfig, `{"version":1,"others":"allow","tenants":[{"name":"ci","match":{"uid":1001},"max_concurrency":1,"max_queue":-1,"rate":"60/min",
			"ceiling":{"limits":{"memory":"256M"},"runtimes":["deno"],"capabilities":{"log":true},"secrets":{}}},{"name":"web","match":{"gid":1002}}]}`, true},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"ci","match":{"uid":1001},"ceiling":{"capabilities":null}}]}`, true},
		{"Config", parseConfig, `{"version":1,"others":"maybe"}`, false},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"CI","match":{"uid":1001}}]}`, false},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"others","match":{"uid":1001}}]}`, false},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"ci","match":{}}]}`, false},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"ci","match":{"uid":1001},"rate":"60/fortnight"}]}`, false},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"ci","match":{"uid":1001},"rate":"0/s"}]}`, false},
		{"Config", parseConfig, `{"version":1,"tenants":[{"name":"ci","match":{"uid":1001},"weight":2}]}`, false},
		{"Config", parseConfig, `{"version":1,"metrics":{"listen":"127.0.0.1:9464","path":"/m"}}`, false},
	} {
		schemaErr := d.Value("#/components/schemas/"+c.schema, []byte(c.body))
		if (schemaErr == nil) != c.valid {
			t.Errorf("%s %.80s: the schema says %v, want valid=%v", c.schema, c.body, schemaErr, c.valid)
		}
		if goErr := c.parse(c.body); goErr == nil && schemaErr != nil {
			t.Errorf("%s %.80s: Go accepts it, the schema refuses it: %v", c.schema, c.body, schemaErr)
		}
	}
}

// TestOpenAPIResultForms encodes results as the daemon does, with a full
// posture and with its summary, the times and the labels, and holds each
// to the result schema; a posture that mixes the two forms is refused.
func TestOpenAPIResultForms(t *testing.T) {
	d := load(t)
	at := time.Date(2026, 1, 2, 15, 4, 5, 6e6, time.UTC)
	full := &api.Posture{Mode: api.ModeRequired, Decision: "run",
		Layers: []api.Layer{{Name: "seccomp", State: api.StateApplied, Core: true}, {Name: "landlock", State: api.StateMissing, Detail: "no ABI"}},
		Cgroup: &api.Cgroup{Mechanic: "v2"}, Runtime: &api.RunRuntime{Name: "deno"}}
	mixed := *full.Summary()
	mixed.Layers = full.Layers
	for _, c := range []struct {
		name    string
		posture *api.Posture
		valid   bool
	}{
		{"no posture", nil, true},
		{"a full posture", full, true},
		{"a summary", full.Summary(), true},
		{"a summary with layers", &mixed, false},
		{"a full posture without its cgroup", &api.Posture{Mode: api.ModeAuto, Decision: "run", Layers: full.Layers}, false},
	} {
		res := api.Result{ID: "r1", Status: api.StatusOK, Logs: []api.LogEntry{}, Value: json.RawMessage(`1`),
			StartedAt: api.Time{Time: at}, FinishedAt: api.Time{Time: at.Add(time.Second)}, QueuedMS: 3,
			Labels: map[string]string{"team": "ci"}, Posture: c.posture}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		err = d.Value("#/components/schemas/Result", b)
		if (err == nil) != c.valid {
			t.Errorf("%s: the schema says %v, want valid=%v\n%s", c.name, err, c.valid, b)
		}
	}
}
