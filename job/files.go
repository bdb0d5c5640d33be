package job

import (
	"encoding/base64"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/runtimes"
)

// validateProgram checks the job's files and entry, stdin and env: every
// refusal names the field at fault (files["../x"], env.PATH).
func (r *Request) validateProgram() error {
	if r.Files != nil {
		if r.Exec != nil {
			return invalidAt("files", "a native program takes no files")
		}
		if r.Source != "" {
			return invalidAt("files", "give source or files, not both")
		}
		if err := checkFiles(r.Files); err != nil {
			return err
		}
		if _, err := r.entry(); err != nil {
			return err
		}
	} else if r.Entry != "" {
		return invalidAt("entry", "names a file of files, and the job has none (source is the one-file form)")
	}
	if _, err := r.StdinBytes(); err != nil {
		return err
	}
	return checkEnv(r.Env)
}

// checkFiles refuses a path that could leave the job's directory or that
// the root cannot hold as a file, and files over the caps.
func checkFiles(files map[string]string) error {
	if len(files) == 0 {
		return invalidAt("files", "empty: give at least the entry's file (or use source)")
	}
	if len(files) > api.MaxFiles {
		return invalidAt("files", "%d files is over the cap of %d", len(files), api.MaxFiles)
	}
	total := 0
	for _, p := range slices.Sorted(maps.Keys(files)) {
		field := fmt.Sprintf("files[%q]", p)
		if err := checkFilePath(p); err != nil {
			return invalidAt(field, "%s", err)
		}
		// A directory of this path must not be a file of the job too.
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if _, ok := files[dir]; ok {
				return invalidAt(field, "its directory %q is a file of the job too", dir)
			}
		}
		total += len(files[p])
	}
	if total > api.MaxFilesBytes {
		return invalidAt("files", "%d bytes in all is over the %d-byte cap", total, api.MaxFilesBytes)
	}
	return nil
}

// checkFilePath says why p is not a relative path that stays inside the
// job's directory, or nil.
func checkFilePath(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty path")
	case len(p) > api.MaxFilePath:
		return fmt.Errorf("%d bytes is over the %d-byte cap of a path", len(p), api.MaxFilePath)
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("absolute path: want one relative to the job's directory")
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("holds a NUL byte")
	case strings.IndexFunc(p, func(c rune) bool { return c < 0x20 || c == 0x7f }) >= 0:
		return fmt.Errorf("holds a control character")
	}
	for seg := range strings.SplitSeq(p, "/") {
		switch seg {
		case "":
			return fmt.Errorf("empty path segment (a doubled or trailing '/')")
		case ".", "..":
			return fmt.Errorf("%q segment: paths are relative to the job's directory and stay inside it", seg)
		}
		if len(seg) > 255 {
			return fmt.Errorf("a segment of %d bytes is over the 255-byte cap of a file name", len(seg))
		}
	}
	return nil
}

// fileList names a job's files for a refusal, sorted, the first few: a
// typo'd entry is seen against the names beside it.
func fileList(files map[string]string) string {
	const shown = 8
	names := slices.Sorted(maps.Keys(files))
	if len(names) > shown {
		return strings.Join(names[:shown], ", ") + fmt.Sprintf(" and %d more", len(names)-shown)
	}
	return strings.Join(names, ", ")
}

// entry is the path, relative to the job's directory, of the file of
// Files that runs: Entry, or the one default entry Files holds for the
// runtime.
func (r *Request) entry() (string, error) {
	rt, err := runtimes.ParseName(r.Runtime)
	if err != nil {
		return "", invalidAt("runtime", "%w", err)
	}
	if r.Entry != "" {
		if err := checkFilePath(r.Entry); err != nil {
			return "", invalidAt("entry", "%q: %s", r.Entry, err)
		}
		if _, ok := r.Files[r.Entry]; !ok {
			return "", invalidAt("entry", "%q is not a file of the job (its files: %s)", r.Entry, fileList(r.Files))
		}
		if ert, err := runtimes.ForFile(r.Entry); err != nil || ert != rt {
			return "", invalidAt("entry", "%q is not a %s program (want %s)", r.Entry, rt, entryExts(rt))
		}
		return r.Entry, nil
	}
	var found []string
	for _, name := range api.DefaultEntries {
		if ert, _ := runtimes.ForFile(name); ert != rt {
			continue
		}
		if _, ok := r.Files[name]; ok {
			found = append(found, name)
		}
	}
	switch len(found) {
	case 0:
		return "", invalidAt("entry", "missing: files holds no default entry for %s, so name the file to run", rt)
	case 1:
		return found[0], nil
	}
	return "", invalidAt("entry", "missing, and files holds %s: name the one to run", strings.Join(found, " and "))
}

func entryExts(rt runtimes.Name) string {
	if rt == runtimes.Python {
		return ".py"
	}
	return ".js, .mjs, .jsx, .ts, .mts or .tsx"
}

// Program returns the job's files by their paths relative to the job's
// directory and the one that runs; a one-file job has none (Source).
// The request must have passed Validate.
func (r *Request) Program() (files map[string]string, entry string) {
	if r.Files == nil {
		return nil, ""
	}
	entry, _ = r.entry()
	return r.Files, entry
}

// StdinBytes returns the job's standard input, decoded.
func (r *Request) StdinBytes() ([]byte, error) {
	var b []byte
	switch r.StdinEncoding {
	case "":
		b = []byte(r.Stdin)
	case api.EncodingBase64:
		var err error
		if b, err = base64.StdEncoding.DecodeString(r.Stdin); err != nil {
			return nil, invalidAt("stdin", "not valid base64: %v", err)
		}
	default:
		return nil, invalidAt("stdin_encoding", "%q (want base64, or nothing for text)", r.StdinEncoding)
	}
	if len(b) > api.MaxStdinBytes {
		return nil, invalidAt("stdin", "%d bytes is over the %d-byte cap", len(b), api.MaxStdinBytes)
	}
	return b, nil
}

// checkEnv refuses an env the program could not be given as asked, or
// one that would change how the runtime behaves (api.EnvReserved).
func checkEnv(env map[string]string) error {
	if len(env) > api.MaxEnv {
		return invalidAt("env", "%d names is over the cap of %d", len(env), api.MaxEnv)
	}
	for _, name := range slices.Sorted(maps.Keys(env)) {
		field := "env." + name
		if !envName(name) {
			return invalidAt("env", "name %q: want 1 to %d bytes of [A-Za-z_][A-Za-z0-9_]*", name, api.MaxEnvNameLen)
		}
		if why := envReserved(name); why != "" {
			return invalidAt(field, "reserved: %s", why)
		}
		v := env[name]
		if len(v) > api.MaxEnvValueLen {
			return invalidAt(field, "%d bytes is over the %d-byte cap", len(v), api.MaxEnvValueLen)
		}
		if strings.IndexByte(v, 0) >= 0 {
			return invalidAt(field, "holds a NUL byte, which no environment can carry")
		}
	}
	return nil
}

func envName(s string) bool {
	if s == "" || len(s) > api.MaxEnvNameLen || s[0] >= '0' && s[0] <= '9' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// envReserved says why name is reserved, or "".
func envReserved(name string) string {
	up := strings.ToUpper(name)
	if slices.Contains(api.EnvProgramOnly, name) {
		return ""
	}
	if slices.Contains(api.EnvReserved, up) {
		return "pmjail sets it, or it redirects what the runtime does"
	}
	for _, p := range api.EnvReservedPrefixes {
		if strings.HasPrefix(up, p) {
			return fmt.Sprintf("%s* names configure the runtime or the loader", p)
		}
	}
	return ""
}
