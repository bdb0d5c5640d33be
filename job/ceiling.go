package job

import (
	"fmt"
	"slices"

	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/profiles"
)

// Within reports the first thing c allows that outer does not, naming the
// field (a *strictjson.Error, "limits.memory", "capabilities.request.
// origins[1]", ...). A daemon's tenants each have a ceiling of their own,
// and the global one bounds them all: a tenant's ceiling that lets a job
// do more than the global one is refused when the config loads rather
// than silently lowered. Both ceilings are as the config built them: the
// broker's with its defaults filled in (ipc.Ceiling.Prepare). Secrets are
// not compared: a tenant's secrets are its own, and what a job may send
// them to is bounded by the origins, which are.
func (c Ceiling) Within(outer Ceiling) error {
	if err := c.Limits.Within(outer.Limits); err != nil {
		return err
	}
	if outer.Runtimes != nil {
		if c.Runtimes == nil {
			return strictjson.Errorf("runtimes", "every runtime, where the global ceiling enables %v", outer.Runtimes)
		}
		for i, rt := range c.Runtimes {
			if !slices.Contains(outer.Runtimes, rt) {
				return strictjson.Errorf(fmt.Sprintf("runtimes[%d]", i), "%s is not enabled by the global ceiling", rt)
			}
		}
	}
	if outer.Profiles != nil {
		if c.Profiles == nil {
			return strictjson.Errorf("profiles", "every built-in profile, where the global ceiling allows %v", outer.Profiles)
		}
		for i, p := range c.Profiles {
			if !slices.Contains(outer.Profiles, p) {
				return strictjson.Errorf(fmt.Sprintf("profiles[%d]", i), "%q is not allowed by the global ceiling", p)
			}
		}
	}
	if outer.Mode == ModeRequired && c.Mode != ModeRequired {
		return strictjson.Errorf("mode", "%q, where the global ceiling requires %q", c.Mode, ModeRequired)
	}
	for _, l := range outer.Required {
		if !slices.Contains(c.Required, l) {
			return strictjson.Errorf("required", "leaves out %q, which the global ceiling requires", l)
		}
	}
	for i, p := range c.Packages {
		if !slices.Contains(outer.Packages, p) {
			return strictjson.Errorf(fmt.Sprintf("packages[%d]", i), "%s is not allowed by the global ceiling", p)
		}
	}
	return brokerWithin(c.Broker, outer.Broker)
}

// brokerWithin is Within for the capabilities and the broker's bounds.
func brokerWithin(c, outer ipc.Ceiling) error {
	if c.AllowLog && !outer.AllowLog {
		return strictjson.Errorf("capabilities.log", "allowed, where the global ceiling refuses it")
	}
	if !c.AllowRequest {
		return nil
	}
	const req = "capabilities.request."
	if !outer.AllowRequest {
		return strictjson.Errorf("capabilities.request", "allowed, where the global ceiling refuses it")
	}
	if outer.Origins != nil {
		if c.Origins == nil {
			return strictjson.Errorf(req+"origins", `"*", where the global ceiling lists its origins`)
		}
		allowed := normalized(outer.Origins)
		for i, o := range c.Origins {
			if n, err := ipc.NormalizeOrigin(o); err != nil || !allowed[n] {
				return strictjson.Errorf(fmt.Sprintf(req+"origins[%d]", i), "%q is not among the global ceiling's origins", o)
			}
		}
	}
	if outer.Methods != nil {
		if c.Methods == nil {
			return strictjson.Errorf(req+"methods", "any method, where the global ceiling lists %v", outer.Methods)
		}
		for i, m := range c.Methods {
			if !slices.Contains(outer.Methods, m) {
				return strictjson.Errorf(fmt.Sprintf(req+"methods[%d]", i), "%q is not allowed by the global ceiling", m)
			}
		}
	}
	if c.AllowPrivateAddresses && !outer.AllowPrivateAddresses {
		return strictjson.Errorf(req+"allow_private_addresses", "true, where the global ceiling's is false")
	}
	if !outer.AllowPrivateAddresses {
		private := normalized(outer.PrivateOrigins)
		for i, o := range c.PrivateOrigins {
			if n, err := ipc.NormalizeOrigin(o); err != nil || !private[n] {
				return strictjson.Errorf(fmt.Sprintf(req+"private_origins[%d]", i), "%q is not among the global ceiling's private origins", o)
			}
		}
	}
	switch {
	case c.MaxResponseBytes > outer.MaxResponseBytes:
		return overGlobal(req+"max_response_bytes", profiles.Size(c.MaxResponseBytes), profiles.Size(outer.MaxResponseBytes))
	case c.RequestTimeout > outer.RequestTimeout:
		return overGlobal(req+"timeout", profiles.Duration(c.RequestTimeout), profiles.Duration(outer.RequestTimeout))
	case c.MaxCalls > outer.MaxCalls:
		return overGlobal(req+"max_calls", c.MaxCalls, outer.MaxCalls)
	case c.MaxInFlight > outer.MaxInFlight:
		return overGlobal(req+"max_in_flight", c.MaxInFlight, outer.MaxInFlight)
	}
	return nil
}

func overGlobal(field string, v, max any) error {
	return strictjson.Errorf(field, "%v is above the global ceiling's %v", v, max)
}

// normalized is a set of origins in normal form; one that is not an
// origin is left out (the config's own check reports it).
func normalized(origins []string) map[string]bool {
	set := make(map[string]bool, len(origins))
	for _, o := range origins {
		if n, err := ipc.NormalizeOrigin(o); err == nil {
			set[n] = true
		}
	}
	return set
}
