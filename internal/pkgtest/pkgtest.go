// Package pkgtest builds small npm tarballs and wheels for tests, so that
// no test of the package store needs a registry.
package pkgtest

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"sort"
	"time"
)

// Tarball builds an npm tarball as npm pack does: each file below
// package/, package.json first. For tests (this package's and the
// integration suite's): nothing in a test needs a registry.
func Tarball(manifest map[string]any, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	pj, _ := json.Marshal(manifest)
	add := func(name string, data []byte) {
		_ = tw.WriteHeader(&tar.Header{Name: "package/" + name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg, ModTime: time.Unix(499162500, 0)})
		_, _ = tw.Write(data)
	}
	add("package.json", pj)
	for _, name := range sortedNames(files) {
		add(name, []byte(files[name]))
	}
	_ = tw.Close()
	_ = zw.Close()
	return buf.Bytes()
}

// Wheel builds a wheel holding files, with the dist-info directory for
// name and version (purelib as given).
func Wheel(name, version string, purelib bool, files map[string]string) []byte {
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	add := func(n, data string) {
		w, _ := zw.Create(n)
		_, _ = w.Write([]byte(data))
	}
	for _, n := range sortedNames(files) {
		add(n, files[n])
	}
	info := name + "-" + version + ".dist-info/"
	add(info+"METADATA", "Metadata-Version: 2.1\nName: "+name+"\nVersion: "+version+"\n")
	pure := "false"
	if purelib {
		pure = "true"
	}
	add(info+"WHEEL", "Wheel-Version: 1.0\nGenerator: pmjail-test\nRoot-Is-Purelib: "+pure+"\nTag: py3-none-any\n")
	add(info+"RECORD", "")
	_ = zw.Close()
	return buf.Bytes()
}

func sortedNames(m map[string]string) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
