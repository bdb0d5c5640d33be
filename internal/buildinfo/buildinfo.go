// Package buildinfo owns the version pmjail reports of itself: `pmjail
// version`, `pmjail --version` and the daemon's /v1/health carry the same
// string.
package buildinfo

import "runtime/debug"

// stamp is the version the Makefile stamps at build time (-ldflags "-X
// github.com/pmjail/pmjail/internal/buildinfo.stamp=$(git describe
// --always --dirty)"): a checkout's build knows its commit exactly.
var stamp string

// Version is the version of this build: the Makefile's stamp; else the
// module version the go command recorded (a `go install ...@v1.2.3`'s, or a
// checkout's pseudo-version); else the checkout's commit; else "dev".
func Version() string {
	if stamp != "" {
		// Every start of a stamped build asks: no need to parse the
		// binary's module record then.
		return stamp
	}
	info, _ := debug.ReadBuildInfo()
	return version(stamp, info)
}

func version(stamp string, info *debug.BuildInfo) string {
	if stamp != "" {
		return stamp
	}
	if info == nil {
		return "dev"
	}
	// A build in the module's checkout records a pseudo-version naming the
	// commit (with "+dirty" for uncommitted changes); before Go 1.24 it
	// recorded "(devel)", and the commit is in the VCS settings.
	if v := info.Main.Version; v != "" && v != "(devel)" {
		return v
	}
	var rev string
	dirty := false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "dev"
	}
	if len(rev) > 12 {
		rev = rev[:12]
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}
