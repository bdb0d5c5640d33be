package ipc

import (
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	ok := []Capabilities{
		{},
		{Log: true},
		{Request: &RequestCapability{URLs: []string{"https://api.example.com", "http://127.0.0.1:8080", "https://x.example/", "http://[::1]:9000"}}},
		{Request: &RequestCapability{URLs: []string{"https://a.example"}, Methods: []string{"GET", "POST"},
			Auth: map[string]string{"https://A.example:443": "key"}}},
	}
	for _, c := range ok {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c.Request, err)
		}
	}
	bad := []struct {
		c    Capabilities
		want string
	}{
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://ok.example", "https://x/path"}}},
			`capabilities.request.urls[1]: "https://x/path" is not a bare origin`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://x?q=1"}}}, `urls[0]: "https://x?q=1" is not a bare origin`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://x#f"}}}, `urls[0]: "https://x#f" is not a bare origin`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://u:p@x"}}}, `urls[0]`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"ftp://x"}}}, `scheme must be http or https`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://x:99999"}}}, `invalid port`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"example.com"}}}, `urls[0]`},
		{Capabilities{Request: &RequestCapability{}}, `capabilities.request.urls: at least one`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://x"}, Methods: []string{"GET", "TRACE"}}},
			`capabilities.request.methods[1]: "TRACE"`},
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://x"}, Auth: map[string]string{"https://y": "k"}}},
			`capabilities.request.auth["https://y"]: origin is not in`},
		// Two keys for one origin: which secret went there was map order.
		{Capabilities{Request: &RequestCapability{URLs: []string{"https://api.example.com"},
			Auth: map[string]string{"https://API.example.com": "a", "https://api.example.com:443": "b"}}},
			`capabilities.request.auth["https://api.example.com:443"]: the same origin (https://api.example.com) as capabilities.request.auth["https://API.example.com"]`},
	}
	for _, tc := range bad {
		err := tc.c.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want it to mention %q", tc.c.Request, err, tc.want)
		}
	}
}

func TestNormalizeOrigin(t *testing.T) {
	for in, want := range map[string]string{
		"HTTPS://API.Example.COM":     "https://api.example.com",
		"https://api.example.com:443": "https://api.example.com",
		"http://x.example:80/":        "http://x.example",
		"http://127.0.0.1:08080":      "http://127.0.0.1:8080",
		"http://[::1]:80":             "http://[::1]",
		"http://[::1]:81":             "http://[::1]:81",
	} {
		got, err := NormalizeOrigin(in)
		if err != nil || got != want {
			t.Errorf("NormalizeOrigin(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
}

func TestParseCapFlag(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		want  Capabilities
	}{
		{[]string{"log"}, Capabilities{Log: true}},
		{[]string{"request=https://a.example"}, Capabilities{Request: &RequestCapability{URLs: []string{"https://a.example"}}}},
		{[]string{"request=http://127.0.0.1:8080:GET"},
			Capabilities{Request: &RequestCapability{URLs: []string{"http://127.0.0.1:8080"}, Methods: []string{"GET"}}}},
		{[]string{"request=http://127.0.0.1:8080"},
			Capabilities{Request: &RequestCapability{URLs: []string{"http://127.0.0.1:8080"}}}},
		{[]string{"request=https://a.example,https://b.example:8443:GET,POST", "log", "request=https://c.example:PUT"},
			Capabilities{Log: true, Request: &RequestCapability{URLs: []string{"https://a.example", "https://b.example:8443", "https://c.example"},
				Methods: []string{"GET", "POST", "PUT"}}}},
		{[]string{"request=http://[::1]:9000:DELETE"},
			Capabilities{Request: &RequestCapability{URLs: []string{"http://[::1]:9000"}, Methods: []string{"DELETE"}}}},
	} {
		var got Capabilities
		for _, f := range tc.flags {
			if err := ParseCapFlag(f, &got); err != nil {
				t.Fatalf("%v: %v", tc.flags, err)
			}
		}
		if !reflect.DeepEqual(got, tc.want) {
			t.Errorf("%v: got %+v %+v, want %+v %+v", tc.flags, got, got.Request, tc.want, tc.want.Request)
		}
		if err := got.Validate(); err != nil {
			t.Errorf("%v: result does not validate: %v", tc.flags, err)
		}
	}
	for _, bad := range []string{"", "net", "log=1", "request", "request=", "request=https://a.example/path",
		"request=https://a.example:get", "request=https://a.example:GET,TRACE"} {
		var c Capabilities
		if err := ParseCapFlag(bad, &c); err == nil {
			t.Errorf("ParseCapFlag(%q) accepted it: %+v", bad, c.Request)
		}
	}
}

func TestWithin(t *testing.T) {
	job := Capabilities{Log: true, Request: &RequestCapability{
		URLs: []string{"https://a.example", "https://b.example"}, Methods: []string{"GET", "POST"},
		Auth: map[string]string{"https://a.example": "a-key"}}}
	full := Ceiling{AllowLog: true, AllowRequest: true, Secrets: map[string]Secret{"a-key": {Value: "v", Origins: []string{"https://a.example"}}}}
	if err := job.Within(full); err != nil {
		t.Fatalf("within the full ceiling: %v", err)
	}
	for _, tc := range []struct {
		mod  func(*Ceiling)
		want string
	}{
		{func(c *Ceiling) { c.AllowLog = false }, "capabilities.log: not allowed"},
		{func(c *Ceiling) { c.AllowRequest = false }, "capabilities.request: not allowed"},
		{func(c *Ceiling) { c.Origins = []string{"https://A.example:443"} }, `capabilities.request.urls[1]: "https://b.example"`},
		{func(c *Ceiling) { c.Methods = []string{"GET"} }, `capabilities.request.methods[1]: "POST"`},
		{func(c *Ceiling) { c.Secrets = nil }, `capabilities.request.auth["https://a.example"]: no secret "a-key"`},
	} {
		c := full
		tc.mod(&c)
		err := job.Within(c)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("got %v, want it to mention %q", err, tc.want)
		}
	}
}

func TestCeilingPrepare(t *testing.T) {
	if _, err := (Ceiling{Origins: []string{"https://ok.example", "ftp://x"}}).Prepare(); err == nil ||
		!strings.Contains(err.Error(), "ceiling.origins[1]") {
		t.Fatalf("a bad origin: %v, want an error naming ceiling.origins[1]", err)
	}
	origins := []string{"https://A.example:443"}
	for i := range 50 {
		origins = append(origins, fmt.Sprintf("https://host%d.example", i))
	}
	built := Ceiling{AllowRequest: true, Origins: origins}
	prepared, err := built.Prepare()
	if err != nil {
		t.Fatal(err)
	}
	if prepared.MaxCalls != DefaultMaxCalls || prepared.RequestTimeout != DefaultRequestTimeout {
		t.Errorf("Prepare left limits unset: %+v", prepared)
	}
	ok := Capabilities{Request: &RequestCapability{URLs: []string{"https://a.example"}}}
	out := Capabilities{Request: &RequestCapability{URLs: []string{"https://b.example"}}}
	for _, c := range []Ceiling{built, prepared} {
		if err := ok.Within(c); err != nil {
			t.Errorf("an allowed origin: %v", err)
		}
		if err := out.Within(c); err == nil || !strings.Contains(err.Error(), "capabilities.request.urls[0]") {
			t.Errorf("an origin beyond the ceiling: %v", err)
		}
	}
	// A prepared ceiling's origins were normalised once: checking a job
	// costs what the job declares, not what the operator allows.
	fresh := testing.AllocsPerRun(20, func() { _ = ok.Within(built) })
	once := testing.AllocsPerRun(20, func() { _ = ok.Within(prepared) })
	if once*4 > fresh {
		t.Errorf("Within allocates %v times on a prepared ceiling, %v on one built in code: the origins are normalised again", once, fresh)
	}
}

func TestCeilingValidate(t *testing.T) {
	if err := PermissiveCeiling().Validate(); err != nil {
		t.Fatal(err)
	}
	bad := Ceiling{Secrets: map[string]Secret{"k": {Value: "a\r\nX-Evil: 1"}}}
	if err := bad.Validate(); err == nil {
		t.Fatal("a secret with CR/LF was accepted")
	}
}

func TestClassify(t *testing.T) {
	for s, want := range map[string]addrClass{
		"93.184.216.34":          addrPublic,
		"2606:2800:220:1::":      addrPublic,
		"127.0.0.1":              addrPrivate,
		"::1":                    addrPrivate,
		"10.1.2.3":               addrPrivate,
		"172.20.0.1":             addrPrivate,
		"192.168.1.1":            addrPrivate,
		"100.64.0.1":             addrPrivate,
		"fd12::1":                addrPrivate,
		"fe80::1":                addrPrivate,
		"169.254.1.1":            addrForbidden,
		"::ffff:127.0.0.1":       addrPrivate,
		"64:ff9b::10.0.0.1":      addrPrivate,
		"2002:c0a8:0101::1":      addrPrivate,
		"169.254.169.254":        addrForbidden,
		"::ffff:169.254.169.254": addrForbidden,
		"fd00:ec2::254":          addrForbidden,
		"100.100.100.200":        addrForbidden,
		"0.0.0.0":                addrForbidden,
		"::":                     addrForbidden,
		"224.0.0.1":              addrForbidden,
		"ff02::1":                addrForbidden,
		"255.255.255.255":        addrForbidden,
	} {
		if got := classify(netip.MustParseAddr(s)); got != want {
			t.Errorf("classify(%s) = %d, want %d", s, got, want)
		}
	}
}
