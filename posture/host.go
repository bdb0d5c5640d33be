package posture

import "github.com/pmjail/pmjail/api"

// Host is information about the host that widens or narrows the attack
// surface, reported as context: it changes no decision.
type Host = api.Host

// Runtime is a guest runtime found on the host.
type Runtime = api.HostRuntime
