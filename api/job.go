package api

import "encoding/json"

// Job is the job object: the body of POST /v1/runs.
type Job struct {
	// Runtime is "deno" or "python"; "typescript" ("ts") is accepted as
	// Deno with type stripping, "jsx" and "tsx" as Deno with JSX (and
	// TSX's types stripped). Names are taken exactly as the OpenAPI enum
	// spells them, in lower case.
	Runtime      string          `json:"runtime"`
	Source       string          `json:"source,omitempty"`
	Input        json.RawMessage `json:"input,omitempty"`
	Capabilities Capabilities    `json:"capabilities"`
	Limits       Limits          `json:"limits"`
	// Mode is "auto" (the default) or "required".
	Mode    string `json:"mode,omitempty"`
	Profile string `json:"profile,omitempty"`
	// Labels are the client's own tags for the run, echoed in its result
	// (at most MaxLabels; see LabelKeyMax and LabelValueMax).
	Labels map[string]string `json:"labels,omitempty"`
	// Posture is how much of the run's posture its result carries:
	// PostureFull (the default) or PostureSummary.
	Posture string `json:"posture,omitempty"`
	// TypeCheck runs Deno's type checker on the program, inside the jail,
	// before it runs; a type error ends the run as error.code TypeError.
	// Without it TypeScript's types are stripped, not checked.
	TypeCheck bool `json:"typecheck,omitempty"`
	// Files is the several-file form of the program, in place of Source:
	// relative path → text, read-only under the job's directory, where
	// relative imports find each other. Entry names the one to run; left
	// out, the one of DefaultEntries that Files holds.
	Files map[string]string `json:"files,omitempty"`
	Entry string            `json:"entry,omitempty"`
	// Stdin is the program's standard input: text, or bytes in base64
	// when StdinEncoding is EncodingBase64. Without it stdin is empty.
	Stdin         string `json:"stdin,omitempty"`
	StdinEncoding string `json:"stdin_encoding,omitempty"`
	// Env is added to the program's environment, which never holds the
	// host's. Names are checked against EnvReserved.
	Env map[string]string `json:"env,omitempty"`
}

// DefaultEntries are the files a job's Files runs when it names no Entry.
var DefaultEntries = []string{"main.ts", "main.tsx", "main.js", "main.jsx", "main.mjs", "main.py"}

// The bounds of a job's Files, Stdin and Env.
const (
	MaxFiles       = 256
	MaxFilesBytes  = 1 << 20 // all the files' text together
	MaxFilePath    = 512     // bytes of one path
	MaxStdinBytes  = 1 << 20 // decoded
	MaxEnv         = 64
	MaxEnvNameLen  = 128
	MaxEnvValueLen = 8 << 10
)

// EnvReserved are the names a job's Env may not set, and
// EnvReservedPrefixes the beginnings of such names, in any case: those
// pmjail sets itself, and those that change how a runtime, the dynamic
// loader or a proxy-aware client behaves rather than what the program
// reads.
var (
	EnvReserved = []string{
		"PATH", "HOME", "LANG", "TMPDIR", "NO_COLOR", "TZDIR",
		"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR",
		// The rest of what glibc drops for a setuid program: each makes
		// the C library read files or modules from a path the job names
		// (its own files are in the root).
		"GCONV_PATH", "GETCONF_DIR", "HOSTALIASES", "LOCALDOMAIN", "LOCPATH",
		"NIS_PATH", "NLSPATH", "RESOLV_HOST_CONF", "RES_OPTIONS",
	}
	EnvReservedPrefixes = []string{"DENO_", "NODE_", "NPM_", "V8_", "RUST_", "LD_", "GLIBC_", "MALLOC_", "PYTHON", "PYODIDE_", "PMJAIL_"}
	// EnvProgramOnly are names of a reserved prefix that only programs
	// read, which a job may set: NODE_ENV, which npm packages read as
	// they load (Deno's own Node layer does not).
	EnvProgramOnly = []string{"NODE_ENV"}
)

// The encodings of bytes carried in a JSON string: EncodingBase64 for
// bytes that are not UTF-8 text; the empty string means text.
const EncodingBase64 = "base64"

// The modes of a run.
const (
	ModeAuto     = "auto"
	ModeRequired = "required"
)

// The amounts of posture a result carries. Full is the default: v1's
// results always carried every layer, and clients read them.
const (
	// PostureFull is every layer with its evidence, the cgroup, what ran
	// and the process state read back.
	PostureFull = "full"
	// PostureSummary is the decision, the mode, and the names of the
	// applied and missing layers: a tenth of a full one's size.
	PostureSummary = "summary"
)

// The bounds of a job's labels: they are echoed in every result and in
// the daemon's "run finished" log line, so they stay small.
const (
	MaxLabels     = 16
	LabelKeyMax   = 64  // bytes, of [a-z0-9_.-]
	LabelValueMax = 256 // bytes
)

// Capabilities is what a job may ask of the host through the broker.
type Capabilities struct {
	Log     bool               `json:"log,omitempty"`
	Request *RequestCapability `json:"request,omitempty"`
}

// RequestCapability lets the guest make HTTP requests to a fixed list of
// origins.
type RequestCapability struct {
	// URLs are bare origins ("https://api.example.com", "http://10.0.0.5:8080").
	URLs []string `json:"urls"`
	// Methods the guest may use; empty means GET only.
	Methods []string `json:"methods,omitempty"`
	// Auth maps an origin (one of URLs) to the name of an operator secret
	// the guest may ask the broker to inject there. The guest names the
	// secret; it never sees its value.
	Auth map[string]string `json:"auth,omitempty"`
}

// The bounds of a RequestCapability's lists: a job names the origins it
// talks to, each method once.
const (
	MaxOrigins = 256 // URLs, and Auth's origins
	MaxMethods = 16
)

// Limits are a job's resource limits; a zero field takes the profile's.
type Limits struct {
	Memory  Size     `json:"memory,omitempty"`
	CPUTime Duration `json:"cpu_time,omitempty"`
	Timeout Duration `json:"timeout,omitempty"`
	Pids    int64    `json:"pids,omitempty"`
	Output  Size     `json:"output,omitempty"`
	// Tmp caps the job's writable /tmp.
	Tmp Size `json:"tmp,omitempty"`
}
