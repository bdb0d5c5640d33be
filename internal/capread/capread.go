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
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		return nil, fmt.Errorf("%s is a directory", path)
	}
	if err != nil || !st.Mode().IsRegular() || st.Size() > max {
		return Reader(f, path, max)
	}
	// A regular file is read into a buffer of its size (and a byte more,
	// to see its end, or that it grew), not grown from nothing by
	// io.ReadAll: for a megabyte that is a dozen copies and fresh pages
	// fewer. The cap still counts what is read, not what stat said.
	return read(f, path, max, make([]byte, 0, st.Size()+1))
}

// Reader reads r to its end, at most max bytes; name names it in errors.
// Past the cap, the error is a *TooLargeError.
func Reader(r io.Reader, name string, max int64) ([]byte, error) {
	return read(r, name, max, make([]byte, 0, 512))
}

// read reads r to its end into buf as io.ReadAll does, at most max bytes.
func read(r io.Reader, name string, max int64, buf []byte) ([]byte, error) {
	r = io.LimitReader(r, max+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := r.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
	}
	if int64(len(buf)) > max {
		return nil, &TooLargeError{Name: name, Max: max}
	}
	return buf, nil
}

// TooLargeError is a file or stream that went past its cap.
type TooLargeError struct {
	Name string
	Max  int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than the %d-byte cap", e.Name, e.Max)
}
