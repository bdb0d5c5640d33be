package job

import (
	"errors"
	"testing"

	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/runtimes"
)

// TestCeilingWithin: a ceiling within another passes; each way of
// exceeding it is named by its field.
func TestCeilingWithin(t *testing.T) {
	outer := DefaultCeiling()
	outer.Runtimes = []runtimes.Name{runtimes.Deno}
	outer.Profiles = []string{"default", "strict"}
	outer.Required = []string{"seccomp"}
	outer.Broker = ipc.Ceiling{AllowLog: true, AllowRequest: true, Origins: []string{"https://a.example"}, Methods: []string{"GET"}}.WithDefaults()

	inner := outer
	inner.Limits.Memory /= 2
	inner.Profiles = []string{"strict"}
	inner.Mode = ModeRequired
	if err := inner.Within(outer); err != nil {
		t.Fatalf("a narrower ceiling: %v", err)
	}
	for field, widen := range map[string]func(c *Ceiling){
		"limits.memory":                           func(c *Ceiling) { c.Limits.Memory *= 4 },
		"runtimes[1]":                             func(c *Ceiling) { c.Runtimes = []runtimes.Name{runtimes.Deno, runtimes.Python} },
		"profiles":                                func(c *Ceiling) { c.Profiles = nil },
		"profiles[0]":                             func(c *Ceiling) { c.Profiles = []string{"permissive"} },
		"mode":                                    func(c *Ceiling) { c.Mode = ModeAuto; outer.Mode = ModeRequired },
		"required":                                func(c *Ceiling) { c.Required = nil },
		"capabilities.log":                        func(c *Ceiling) { outer.Broker.AllowLog = false },
		"capabilities.request.origins":            func(c *Ceiling) { c.Broker.Origins = nil },
		"capabilities.request.origins[0]":         func(c *Ceiling) { c.Broker.Origins = []string{"https://b.example"} },
		"capabilities.request.methods[0]":         func(c *Ceiling) { c.Broker.Methods = []string{"POST"} },
		"capabilities.request.max_calls":          func(c *Ceiling) { c.Broker.MaxCalls++ },
		"capabilities.request.timeout":            func(c *Ceiling) { c.Broker.RequestTimeout++ },
		"capabilities.request.private_origins[0]": func(c *Ceiling) { c.Broker.PrivateOrigins = []string{"http://127.0.0.1:8080"} },
	} {
		saved := outer
		c := inner
		widen(&c)
		err := c.Within(outer)
		outer = saved
		e, ok := errors.AsType[*strictjson.Error](err)
		if !ok || e.Field != field {
			t.Errorf("%s widened: %v, want the field named", field, err)
		}
	}
}
