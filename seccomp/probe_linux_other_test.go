//go:build !amd64

package seccomp_test

// archDangerous: other architectures have no probes of their own.
var archDangerous = map[string]string{}
