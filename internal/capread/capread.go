// Package capread reads files and streams that must be small: a job's
// program and input, a profile, a seccomp policy. A path such as
// /dev/zero, or a stream that does not end, fails at the cap instead of
// filling memory.
package capread

import (
	"fmt"
	"io"
	"os"
)

// File reads the file at path, of at most max bytes.
func File(path string, max int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	return Reader(f, path, max)
}

// Reader reads r to its end, at most max bytes; name names it in errors.
func Reader(r io.Reader, name string, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than the %d-byte cap", name, max)
	}
	return data, nil
}
