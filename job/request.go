package job

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/capread"
	"github.com/pmjail/pmjail/internal/strictjson"
	"github.com/pmjail/pmjail/ipc"
	"github.com/pmjail/pmjail/profiles"
	"github.com/pmjail/pmjail/runtimes"
)

// MaxSourceBytes caps a job's program text.
const MaxSourceBytes = 1 << 20

// MaxInputBytes caps a job's input.
const MaxInputBytes = 1 << 20

// MaxRequestBytes caps a whole job object: its source (or files), input
// and stdin (in base64 at most), with room for the rest.
const MaxRequestBytes = MaxSourceBytes + MaxInputBytes + api.MaxStdinBytes*4/3 + 128<<10

// ErrInvalid marks every error caused by the request itself.
var ErrInvalid = errors.New("invalid job")

// Request is the job object as the engine reads it: the socket API's
// request body (api.Job, converted by FromAPI and API), and what the CLI
// builds from its flags.
type Request struct {
	// Runtime is "deno" or "python"; "typescript", "jsx" and "tsx" are
	// accepted as Deno with that dialect (runtimes.DialectOf). It is
	// spelled exactly as the socket API takes it (runtimes.Names): the
	// CLI lower-cases its --runtime.
	Runtime      string           `json:"runtime"`
	Source       string           `json:"source,omitempty"`
	Input        json.RawMessage  `json:"input,omitempty"`
	Capabilities ipc.Capabilities `json:"capabilities"`
	Limits       profiles.Limits  `json:"limits"`
	Mode         string           `json:"mode,omitempty"`
	Profile      string           `json:"profile,omitempty"`
	// Labels and Posture are the client's: echoed in the result, and how
	// much posture it carries (api.Job says more).
	Labels  map[string]string `json:"labels,omitempty"`
	Posture string            `json:"posture,omitempty"`
	// TypeCheck asks for Deno's type checker before the run (api.Job).
	TypeCheck bool `json:"typecheck,omitempty"`
	// Files, Entry, Stdin, StdinEncoding and Env are api.Job's (see
	// files.go for their checks).
	Files         map[string]string `json:"files,omitempty"`
	Entry         string            `json:"entry,omitempty"`
	Stdin         string            `json:"stdin,omitempty"`
	StdinEncoding string            `json:"stdin_encoding,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	// Exec is set only by the CLI's `pmjail exec`: a native program instead
	// of a runtime. It is not part of the socket API.
	Exec *Exec `json:"-"`
}

// Exec describes a native program run by `pmjail exec`.
type Exec struct {
	Program string
	Args    []string
	// Binds are extra host paths bound read-only (SRC[:DST]).
	Binds []string
}

// invalid wraps a message as a request error.
func invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalid, fmt.Sprintf(format, args...))
}

// invalidAt wraps a message about one field of the request as a request
// error whose *strictjson.Error names the field.
func invalidAt(field, format string, args ...any) error {
	return fmt.Errorf("%w: %w", ErrInvalid, strictjson.Errorf(field, format, args...))
}

// Refusal is a request error's message without ErrInvalid's head, and the
// field at fault, if one is known: the outermost *strictjson.Error in the
// chain names it, whether decoding or a check refused the value.
func Refusal(err error) (msg, field string) {
	msg = strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": ")
	if e, ok := errors.AsType[*strictjson.Error](err); ok {
		field = e.Field
	}
	return msg, field
}

// MalformedJSON heads Decode's message for a body that is not one job
// object as JSON (a value at fault in a well-formed one is named by its
// field alone).
const MalformedJSON = "malformed job JSON"

// Decode reads one job object. Unknown fields, trailing data and oversize
// bodies are refused with a message that names the problem and, as a
// *strictjson.Error in the chain, the field at fault. What the job
// asks for is checked by Resolve (Validate), the one place for those checks
// whether the job came as JSON or from the CLI's flags.
func Decode(r io.Reader) (*Request, error) {
	data, err := capread.Reader(r, "job", MaxRequestBytes)
	if _, ok := errors.AsType[*capread.TooLargeError](err); ok {
		return nil, fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if err != nil {
		return nil, fmt.Errorf("read job: %w", err)
	}
	if err := boundEntries(data); err != nil {
		return nil, err
	}
	var req Request
	if err := strictjson.Decode(data, &req); err != nil {
		// "limits.memory: …", as Validate says it, or "malformed job JSON: …"
		return nil, fmt.Errorf("%w: %w", ErrInvalid, strictjson.Headed(err, MalformedJSON))
	}
	if err := refuseNullEntries(data); err != nil {
		return nil, err
	}
	return &req, nil
}

// maxEntries bounds every list and map of a job (the input aside) as it
// is read, above each one's own cap (api.MaxFiles, ipc.MaxOrigins, ...),
// which names it once decoded. Decoded, an entry costs many times its
// text: a body of the largest size holds a million empty strings, a
// hundred MiB once in a []string, read while the request holds its body
// slot, whose budget counts the body's bytes.
const maxEntries = 1024

// boundEntries refuses a job whose lists or maps (outside its input)
// hold more than maxEntries entries, without keeping any. A body that is
// not valid JSON is left to strictjson.Decode to say why.
func boundEntries(data []byte) error {
	dec := jsontext.NewDecoder(bytes.NewReader(data), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil
		}
		depth := dec.StackDepth()
		if tok.Kind() == '"' && depth == 1 && tok.String() == "input" {
			if _, n := dec.StackIndex(1); n%2 == 1 { // a name, not a value
				if err := dec.SkipValue(); err != nil {
					return nil
				}
			}
			continue
		}
		if depth == 0 {
			continue
		}
		kind, n := dec.StackIndex(depth)
		if kind == '{' {
			n /= 2 // names and values
		}
		if n > maxEntries {
			at := slices.Collect(dec.StackPointer().Tokens())
			if len(at) < 2 {
				return invalid("the job object has more than %d members", maxEntries)
			}
			return invalidAt(strings.Join(at[:len(at)-1], "."), "more than %d entries", maxEntries)
		}
	}
}

// nullMaps are the job's maps of strings, by their JSON pointer's tokens
// before the key.
var nullMaps = [][]string{{"env"}, {"labels"}, {"files"}, {"capabilities", "request", "auth"}}

// refuseNullEntries refuses a null where a map of the job holds strings:
// decoded, {"env": {"A": null}} set A to "" (present, empty), and a
// files entry of null was an empty file, where a reader before pmjail
// (and the OpenAPI schema) takes null for no string at all. Only a body
// that holds "null" somewhere is walked; the input, whatever it holds,
// is skipped.
func refuseNullEntries(data []byte) error {
	if !bytes.Contains(data, []byte("null")) {
		return nil
	}
	dec := jsontext.NewDecoder(bytes.NewReader(data))
	for {
		tok, err := dec.ReadToken()
		if err != nil {
			return nil // Decode took the body: nothing left to read
		}
		switch {
		case tok.Kind() == '"' && dec.StackDepth() == 1 && tok.String() == "input":
			if _, k := dec.StackIndex(1); k%2 == 1 { // a name, not a value
				if err := dec.SkipValue(); err != nil {
					return nil
				}
			}
		case tok.Kind() == 'n':
			at := slices.Collect(dec.StackPointer().Tokens())
			if len(at) < 2 {
				continue
			}
			for _, m := range nullMaps {
				if len(at) == len(m)+1 && slices.Equal(at[:len(m)], m) {
					return invalidAt(fmt.Sprintf("%s[%q]", strings.Join(m, "."), at[len(m)]), "want a string, got JSON null")
				}
			}
		}
	}
}

// Validate checks what can be checked without a profile or ceiling.
func (r *Request) Validate() error {
	if r.Exec == nil {
		if r.Runtime == "" {
			return invalidAt("runtime", "missing (want deno or python)")
		}
		if r.Source == "" && r.Files == nil {
			return invalidAt("source", "empty program")
		}
	}
	if err := r.validateProgram(); err != nil {
		return err
	}
	if len(r.Source) > MaxSourceBytes {
		return invalidAt("source", "%d bytes is over the %d-byte cap", len(r.Source), MaxSourceBytes)
	}
	if len(r.Input) > MaxInputBytes {
		return invalidAt("input", "%d bytes is over the %d-byte cap", len(r.Input), MaxInputBytes)
	}
	if err := checkInput(r.Input); err != nil {
		return err
	}
	switch r.Mode {
	case "", ModeAuto, ModeRequired:
	default:
		return invalidAt("mode", "%q (want auto or required)", r.Mode)
	}
	if err := r.Capabilities.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalid, err)
	}
	if n, err := runtimes.ParseName(r.Runtime); r.TypeCheck && (r.Exec != nil || err == nil && n != runtimes.Deno) {
		return invalidAt("typecheck", "only a Deno program (runtime deno, typescript, jsx or tsx) is type-checked")
	}
	switch r.Posture {
	case "", api.PostureFull, api.PostureSummary:
	default:
		return invalidAt("posture", "%q (want summary or full)", r.Posture)
	}
	return validateLabels(r.Labels)
}

// validateLabels checks the client's labels against the contract's
// bounds: they travel back in the run's result.
func validateLabels(labels map[string]string) error {
	if len(labels) > api.MaxLabels {
		return invalidAt("labels", "%d labels is over the cap of %d", len(labels), api.MaxLabels)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if k == "" || len(k) > api.LabelKeyMax || strings.IndexFunc(k, notLabelKeyRune) >= 0 {
			return invalidAt("labels", "key %q: want 1 to %d bytes of a-z, 0-9, '_', '.' and '-'", k, api.LabelKeyMax)
		}
		if v := labels[k]; len(v) > api.LabelValueMax {
			return invalidAt("labels."+k, "%d bytes is over the %d-byte cap", len(v), api.LabelValueMax)
		}
	}
	return nil
}

func notLabelKeyRune(c rune) bool {
	return !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-')
}

// checkInput refuses input that is not one JSON value, or that holds a
// key twice in one object: decoded, the job's JSON had that checked, but
// the CLI's --input was not decoded, and the guest's parser would take
// one of the two where a reader before pmjail may have taken the other.
func checkInput(input json.RawMessage) error {
	if len(input) == 0 || strictjson.Valid(input) {
		return nil
	}
	var v json.RawMessage
	err := strictjson.Decode(input, &v)
	if err == nil {
		return nil
	}
	if e, ok := errors.AsType[*strictjson.Error](err); ok && e.Field != "" {
		field := "input." + e.Field
		if strings.HasPrefix(e.Field, "[") {
			field = "input" + e.Field
		}
		return invalidAt(field, "%w", e.Err)
	}
	if errors.Is(err, strictjson.ErrInvalidUTF8) {
		return invalidAt("input", "%w", err)
	}
	return invalidAt("input", "not valid JSON")
}

// The modes of a run.
const (
	ModeAuto     = api.ModeAuto
	ModeRequired = api.ModeRequired
)
