package posture

// Host is information about the host that widens or narrows the attack
// surface, reported as context: it changes no decision.
type Host struct {
	Kernel string `json:"kernel"`
	// Privileged: the supervisor runs as root with CAP_SYS_ADMIN, which
	// every layer needs.
	Privileged     bool              `json:"privileged"`
	Sysctls        map[string]string `json:"sysctls,omitempty"`
	SeccompActions []string          `json:"seccomp_actions,omitempty"`
	LandlockABI    int               `json:"landlock_abi"`
	Runtimes       []Runtime         `json:"runtimes,omitempty"`
}

// Runtime is a guest runtime found on the host.
type Runtime struct {
	Name    string `json:"name"`
	Version string `json:"version,omitempty"`
	Path    string `json:"path,omitempty"`
	// Start is how Python starts: "snapshot" or "cold: <why>".
	Start  string `json:"start,omitempty"`
	Detail string `json:"detail,omitempty"`
}
