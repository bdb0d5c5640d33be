package runtimes

// testWarmer is the Warmer of the tests' installs: job.Warm, which this
// package cannot import (job imports it), set by warm_test.go.
var testWarmer Warmer

// SetTestWarmer sets the tests' Warmer.
func SetTestWarmer(w Warmer) { testWarmer = w }
