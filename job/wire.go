package job

import (
	"errors"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/profiles"
)

// FromAPI returns the engine's request for a job of the socket contract.
func FromAPI(j *api.Job) *Request {
	r := &Request{
		Runtime: j.Runtime, Source: j.Source, Input: j.Input,
		Capabilities: ipc.Capabilities{Log: j.Capabilities.Log},
		// The same fields of the same units (profiles' are api's).
		Limits: profiles.Limits(j.Limits),
		Mode:   j.Mode, Profile: j.Profile, Labels: j.Labels, Posture: j.Posture,
		TypeCheck: j.TypeCheck,
		Files:     j.Files, Entry: j.Entry, Stdin: j.Stdin, StdinEncoding: j.StdinEncoding, Env: j.Env,
	}
	if c := j.Capabilities.Request; c != nil {
		r.Capabilities.Request = &ipc.RequestCapability{URLs: c.URLs, Methods: c.Methods, Auth: c.Auth}
	}
	return r
}

// ErrNotWire refuses a request the socket contract cannot carry.
var ErrNotWire = errors.New("native programs (exec) are not part of the socket API")

// API returns the request as the socket contract's job. Exec has no place
// there (ErrNotWire): a native program is the CLI's alone.
func (r *Request) API() (*api.Job, error) {
	if r.Exec != nil {
		return nil, ErrNotWire
	}
	j := &api.Job{
		Runtime: r.Runtime, Source: r.Source, Input: r.Input,
		Capabilities: api.Capabilities{Log: r.Capabilities.Log},
		Limits:       api.Limits(r.Limits),
		Mode:         r.Mode, Profile: r.Profile, Labels: r.Labels, Posture: r.Posture,
		TypeCheck: r.TypeCheck,
		Files:     r.Files, Entry: r.Entry, Stdin: r.Stdin, StdinEncoding: r.StdinEncoding, Env: r.Env,
	}
	if c := r.Capabilities.Request; c != nil {
		j.Capabilities.Request = &api.RequestCapability{URLs: c.URLs, Methods: c.Methods, Auth: c.Auth}
	}
	return j, nil
}
