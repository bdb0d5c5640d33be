package main

import (
	"encoding/base64"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/pmjail/pmjail/api"
	"github.com/pmjail/pmjail/internal/capread"
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/runtimes"
)

// directory makes req the several-file program in dir: every regular file
// below it (dot files and dot directories left out), the entry --entry's
// or the default one, and the runtime --runtime's or the entry's.
func (f *runFlags) directory(req *job.Request, dir string) error {
	files, err := readTree(dir)
	if err != nil {
		return err
	}
	req.Files, req.Entry = files, f.entry
	entry := f.entry
	if entry == "" {
		for _, name := range api.DefaultEntries {
			if _, ok := files[name]; ok {
				entry = name
				break
			}
		}
		if entry == "" {
			return fmt.Errorf("%s holds none of %s: name the file that runs with --entry", dir, strings.Join(api.DefaultEntries, ", "))
		}
	}
	if req.Runtime == "" {
		if _, err := runtimes.ForFile(entry); err != nil {
			return fmt.Errorf("--entry: %w", err)
		}
		req.Runtime = runtimeForFile(entry)
	}
	return f.stdin(req, false)
}

// readTree reads the regular files below dir by their slash-separated
// paths relative to it, within the job's caps.
func readTree(dir string) (map[string]string, error) {
	files := map[string]string{}
	total := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == dir {
			return nil
		}
		if strings.HasPrefix(d.Name(), ".") {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("%s: not a regular file (pmjail sends a DIR's regular files only)", p)
		}
		if len(files) == api.MaxFiles {
			return fmt.Errorf("%s: more than %d files", dir, api.MaxFiles)
		}
		data, err := capread.File(p, int64(api.MaxFilesBytes-total))
		if err != nil {
			return fmt.Errorf("%s: %w (all the files together may hold %d bytes)", dir, err, api.MaxFilesBytes)
		}
		if !utf8.Valid(data) {
			return fmt.Errorf("%s: not UTF-8 text", p)
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		total += len(data)
		files[filepath.ToSlash(rel)] = string(data)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no files", dir)
	}
	return files, nil
}

// stdin gives the program pmjail's own standard input, unless the
// program text came from it (fromStdin), --no-stdin says not to, or it is
// a terminal or other character device (a terminal would wait for typing,
// and /dev/null holds nothing).
func (f *runFlags) stdin(req *job.Request, fromStdin bool) error {
	if fromStdin || f.noStdin {
		return nil
	}
	st, err := os.Stdin.Stat()
	if err != nil || st.Mode()&fs.ModeCharDevice != 0 {
		return nil
	}
	data, err := capread.Reader(os.Stdin, "stdin", api.MaxStdinBytes)
	if err != nil {
		return fmt.Errorf("stdin: %w", err)
	}
	req.Stdin = string(data)
	if !utf8.Valid(data) {
		req.Stdin, req.StdinEncoding = base64.StdEncoding.EncodeToString(data), api.EncodingBase64
	}
	return nil
}

// environment adds the --env pairs to req.
func (f *runFlags) environment(req *job.Request) error {
	for _, kv := range f.env {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || name == "" {
			return fmt.Errorf("--env %q: want NAME=VALUE", kv)
		}
		if req.Env == nil {
			req.Env = map[string]string{}
		}
		if _, dup := req.Env[name]; dup {
			return fmt.Errorf("--env: %s given twice", name)
		}
		req.Env[name] = value
	}
	return nil
}
