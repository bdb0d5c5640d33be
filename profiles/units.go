package profiles

import "github.com/pmjail/pmjail/api"

// Size and Duration are the units of a job's limits, in the forms the
// contract reads them ("64M", "30s"): one definition, package api's.
type (
	Size     = api.Size
	Duration = api.Duration
)

// ParseSize parses "128M", "1G", "512K", "1048576" or "1Mi".
func ParseSize(s string) (Size, error) { return api.ParseSize(s) }

// ParseDuration parses "2s", "500ms", "1m" or a bare number of milliseconds.
func ParseDuration(s string) (Duration, error) { return api.ParseDuration(s) }
