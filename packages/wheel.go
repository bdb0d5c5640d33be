package packages

import (
	"archive/zip"
	"bufio"
	"bytes"
	"fmt"
	"io"
	"path/filepath"
	"strings"
)

// AddWheel adds the wheel at path. Only a pure-Python wheel is taken (ABI
// none, platform any, Root-Is-Purelib: true): Pyodide runs no native code
// but its own, and the store fetches no wheels. Its files are unpacked as
// they would land in site-packages (a .data/purelib or platlib directory
// merged in, other .data directories left out).
func (s *Store) AddWheel(path string) (Entry, error) {
	base := filepath.Base(path)
	parts := strings.Split(strings.TrimSuffix(base, ".whl"), "-")
	if !strings.HasSuffix(base, ".whl") || (len(parts) != 5 && len(parts) != 6) {
		return Entry{}, fmt.Errorf("%w: %s: not a wheel file name (NAME-VERSION-PY-ABI-PLATFORM.whl)", ErrRefused, base)
	}
	abi, platform := parts[len(parts)-2], parts[len(parts)-1]
	if abi != "none" || platform != "any" {
		return Entry{}, fmt.Errorf("%w: %s is not a pure-Python wheel (abi %s, platform %s; want none and any): Pyodide cannot load native code from the store", ErrRefused, base, abi, platform)
	}
	ref := Ref{Kind: Python, Name: PyName(parts[0]), Version: parts[1]}
	if err := ref.check(); err != nil {
		return Entry{}, fmt.Errorf("%s: %w", base, err)
	}
	data, err := readCapped(path, maxTarballBytes)
	if err != nil {
		return Entry{}, err
	}
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Entry{}, fmt.Errorf("%w: %s is not a zip archive: %w", ErrRefused, base, err)
	}
	distInfo := parts[0] + "-" + parts[1] + ".dist-info/"
	dataDir := parts[0] + "-" + parts[1] + ".data/"
	var wheelMeta []byte
	for _, f := range zr.File {
		if strings.EqualFold(f.Name, distInfo+"WHEEL") {
			if wheelMeta, err = readZip(f); err != nil {
				return Entry{}, fmt.Errorf("%w: %s: %w", ErrRefused, base, err)
			}
		}
	}
	if wheelMeta == nil {
		return Entry{}, fmt.Errorf("%w: %s has no %sWHEEL", ErrRefused, base, distInfo)
	}
	if !purelib(wheelMeta) {
		return Entry{}, fmt.Errorf("%w: %s is not a pure-Python wheel (its WHEEL file lacks Root-Is-Purelib: true)", ErrRefused, base)
	}
	u, work, err := s.newUnpacker()
	if err != nil {
		return Entry{}, err
	}
	defer removeSealed(work)
	for _, f := range zr.File {
		name := f.Name
		if strings.HasSuffix(name, "/") {
			continue
		}
		if rest, ok := strings.CutPrefix(name, dataDir); ok {
			sub, file, _ := strings.Cut(rest, "/")
			if sub != "purelib" && sub != "platlib" {
				continue
			}
			name = file
		}
		if !f.Mode().IsRegular() {
			return Entry{}, fmt.Errorf("%w: %s: %s is not a regular file", ErrRefused, base, f.Name)
		}
		b, err := readZip(f)
		if err != nil {
			return Entry{}, fmt.Errorf("%w: %s: %w", ErrRefused, base, err)
		}
		if err := u.write(name, b); err != nil {
			return Entry{}, fmt.Errorf("%s: %w", base, err)
		}
	}
	if err := u.seal(); err != nil {
		return Entry{}, err
	}
	e := Entry{Ref: ref, Integrity: integrity(data), Source: path}
	if err := s.commit(u.root, e); err != nil {
		return Entry{}, fmt.Errorf("add %s: %w", ref, err)
	}
	return e, nil
}

func readZip(f *zip.File) ([]byte, error) {
	if f.UncompressedSize64 > maxPackageBytes {
		return nil, fmt.Errorf("%s is larger than %d bytes", f.Name, maxPackageBytes)
	}
	r, err := f.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, maxPackageBytes))
}

func purelib(wheel []byte) bool {
	sc := bufio.NewScanner(bytes.NewReader(wheel))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.EqualFold(strings.TrimSpace(k), "Root-Is-Purelib") {
			return strings.EqualFold(strings.TrimSpace(v), "true")
		}
	}
	return false
}

// AddFile adds a local npm tarball (.tgz, .tar.gz) or wheel (.whl).
func (s *Store) AddFile(path string) (Entry, error) {
	switch {
	case strings.HasSuffix(path, ".whl"):
		return s.AddWheel(path)
	case strings.HasSuffix(path, ".tgz"), strings.HasSuffix(path, ".tar.gz"):
		return s.AddTarball(path)
	}
	return Entry{}, fmt.Errorf("%w: %s: want an npm tarball (.tgz) or a wheel (.whl)", ErrRefused, path)
}
