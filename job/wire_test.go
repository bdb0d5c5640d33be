package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"reflect"
	"strings"
	"testing"

	"github.com/pmjail/pmjail/api"
)

// jsonMembers lists a struct type's JSON members (name and options), the
// way encoding/json reads its tags.
func jsonMembers(t reflect.Type) []string {
	var ms []string
	for i := range t.NumField() {
		f := t.Field(i)
		if tag := f.Tag.Get("json"); tag != "-" {
			ms = append(ms, f.Name+" "+tag)
		}
	}
	return ms
}

// The engine's request and the contract's job are one JSON object: every
// member of one is a member of the other, down to the capabilities and
// the limits.
func TestRequestIsTheJob(t *testing.T) {
	caps, _ := reflect.TypeFor[Request]().FieldByName("Capabilities")
	request, _ := caps.Type.FieldByName("Request")
	limits, _ := reflect.TypeFor[Request]().FieldByName("Limits")
	pairs := [][2]reflect.Type{
		{reflect.TypeFor[Request](), reflect.TypeFor[api.Job]()},
		{caps.Type, reflect.TypeFor[api.Capabilities]()},
		{request.Type.Elem(), reflect.TypeFor[api.RequestCapability]()},
		{limits.Type, reflect.TypeFor[api.Limits]()},
	}
	for _, p := range pairs {
		if a, b := jsonMembers(p[0]), jsonMembers(p[1]); !reflect.DeepEqual(a, b) {
			t.Errorf("%v and %v differ:\n%q\n%q", p[0], p[1], a, b)
		}
	}

	body := `{"runtime":"deno","source":"1","input":{"a":1},"capabilities":{"log":true,"request":{"urls":["https://a.example"],"methods":["GET","POST"],"auth":{"https://a.example":"tok"}}},"limits":{"memory":"64M","cpu_time":"1.5s","timeout":"2s","pids":8,"output":"1K","tmp":"3M"},"mode":"auto","profile":"strict","labels":{"tenant.a":"x"},"posture":"summary"}`
	req, err := Decode(strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var j api.Job
	if err := json.Unmarshal([]byte(body), &j); err != nil {
		t.Fatal(err)
	}
	fromReq, err := req.API()
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]any{"engine": req, "api": &j, "API": fromReq, "FromAPI": FromAPI(&j)} {
		got, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, []byte(body)) {
			t.Errorf("%s:\n got %s\nwant %s", name, got, body)
		}
	}
	if _, err := (&Request{Exec: &Exec{Program: "/bin/true"}}).API(); !errors.Is(err, ErrNotWire) {
		t.Errorf("exec as a wire job: %v", err)
	}
}

func TestValidateLabelsAndPosture(t *testing.T) {
	many := map[string]string{}
	for i := range api.MaxLabels + 1 {
		many[strings.Repeat("k", i+1)] = "v"
	}
	ok := map[string]string{"a": "", "team_1.x-y": strings.Repeat("v", api.LabelValueMax), strings.Repeat("k", api.LabelKeyMax): "v"}
	cases := []struct {
		labels  map[string]string
		posture string
		field   string // "" means accepted
	}{
		{ok, "", ""},
		{nil, api.PostureSummary, ""},
		{nil, api.PostureFull, ""},
		{nil, "brief", "posture"},
		{many, "", "labels"},
		{map[string]string{"Team": "x"}, "", "labels"},
		{map[string]string{"": "x"}, "", "labels"},
		{map[string]string{"a b": "x"}, "", "labels"},
		{map[string]string{strings.Repeat("k", api.LabelKeyMax+1): "x"}, "", "labels"},
		{map[string]string{"big": strings.Repeat("v", api.LabelValueMax+1)}, "", "labels.big"},
	}
	for _, c := range cases {
		r := &Request{Runtime: "deno", Source: "1", Labels: c.labels, Posture: c.posture}
		err := r.Validate()
		if c.field == "" {
			if err != nil {
				t.Errorf("%v %q: %v", c.labels, c.posture, err)
			}
			continue
		}
		if _, field := Refusal(err); !errors.Is(err, ErrInvalid) || field != c.field {
			t.Errorf("%.60v %q: %v (field %q), want a refusal of %s", c.labels, c.posture, err, field, c.field)
		}
	}
}

// A run's labels reach the daemon's "run finished" line as one object,
// keys sorted, so that an operator finds a client's run by its tags; a
// run without labels logs no labels key.
func TestLabelsLogged(t *testing.T) {
	var b bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&b, nil))
	log.Info("run finished", labelsAttr(map[string]string{"team": "ci", "build.id": `4 "2"`}))
	if want := `"labels":{"build.id":"4 \"2\"","team":"ci"}`; !strings.Contains(b.String(), want) {
		t.Errorf("logged %s, want %s in it", b.String(), want)
	}
	b.Reset()
	log.Info("run finished", labelsAttr(nil))
	if strings.Contains(b.String(), "labels") {
		t.Errorf("a run without labels logged %s", b.String())
	}
}
