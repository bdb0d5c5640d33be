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
// Past the cap, the error is a *TooLargeError.
func Reader(r io.Reader, name string, max int64) ([]byte, error) {
	data, err := io.ReadAll(io.LimitReader(r, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, &TooLargeError{Name: name, Max: max}
	}
	return data, nil
}

// TooLargeError is a file or stream that went past its cap.
type TooLargeError struct {
	Name string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than the %d-byte cap", e.Name, e.Max)
}
