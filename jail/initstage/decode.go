package initstage

import (
	"bufio"
	"encoding/json"
	"io"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// wireConfig is a Config as the init stage decodes it: the same JSON, with
// the process narrowed to the fields the init stage acts on. encoding/json
// builds its reflection tables (field lists and encoders) for every type
// reachable from the one it decodes into, whatever the input holds, and
// specs.Process reaches a dozen types the init stage never reads
// (capabilities, scheduler, I/O priority, CPU affinity, console size):
// ~0.25 ms of every run. The field Process here hides Config's, so its
// type is never walked.
type wireConfig struct {
	Config
	Process *wireProcess `json:"process"`
}

// wireProcess is the part of specs.Process the init stage uses: what to
// exec, as whom, with which rlimits. TestWireProcess fails when the spec
// grows a field no one has placed here or among ignoredProcessFields.
type wireProcess struct {
	User    specs.User          `json:"user"`
	Args    []string            `json:"args,omitempty"`
	Env     []string            `json:"env,omitempty"`
	Rlimits []specs.POSIXRlimit `json:"rlimits,omitempty"`
}

// PrestartedEnv marks an init stage started ahead of its job (jail.Pool):
// it has time to spare before its configuration comes.
const PrestartedEnv = prestartedVar + "=1"

const prestartedVar = "PMJAIL_PRESTARTED"

// warmSample reaches every type a configuration holds.
const warmSample = `{"process": {"user": {"uid": 1, "gid": 1}, "args": ["a"], "env": ["A=1"],
  "rlimits": [{"type": "RLIMIT_CORE", "hard": 0, "soft": 0}]}, "hostname": "h",
  "mounts": [{"destination": "/d", "type": "bind", "source": "/s", "options": ["ro"]}],
  "namespaces": ["pid"], "files": [{"Path": "/f", "Data": "AA==", "Mode": 292}],
  "seccomp": "AA==", "host_mount_ns": 1, "landlock": true, "channel": true, "cgroup_join": 1}`

// warmDecoder decodes a sample configuration, so that encoding/json's
// reflection over these types (built on first use in every process) and
// the code it runs are ready when the real one arrives: ~0.4 ms less
// between a prestarted init stage's configuration and its exec.
func warmDecoder() {
	_, _ = decodeConfig(strings.NewReader(warmSample))
}

// decodeConfig reads the supervisor's configuration: one JSON value, which
// the supervisor writes in one piece and follows with nothing until the
// report, so a large buffer reads it in one system call, not in the
// decoder's doubling chunks from 512 bytes.
func decodeConfig(r io.Reader) (Config, error) {
	var w wireConfig
	if err := json.NewDecoder(bufio.NewReaderSize(r, 64<<10)).Decode(&w); err != nil {
		return Config{}, err
	}
	cfg := w.Config
	if p := w.Process; p != nil {
		cfg.Process = &specs.Process{User: p.User, Args: p.Args, Env: p.Env, Rlimits: p.Rlimits}
	}
	return cfg, nil
}
