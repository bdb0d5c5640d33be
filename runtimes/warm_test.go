package runtimes_test

import (
	"github.com/pmjail/pmjail/job"
	"github.com/pmjail/pmjail/runtimes"
)

// The tests warm their caches in pmjail's own jail, as the supervisor does.
func init() { runtimes.SetTestWarmer(job.Warm) }
