// Package layout names what every job's root holds, and where: the paths
// the runtimes, the supervisor and the init stage agree on, and the files
// written into the root. It depends on os alone, so the init stage, which
// needs only these names, links nothing else of package runtimes (its
// hashing, JSON and process code and their package initialisers).
package layout

import "os"

// File is a file created inside the job's root; with os.ModeDir in Mode,
// an empty directory.
type File struct {
	Path string
	Data []byte
	Mode os.FileMode
}

// Paths inside every job's root.
const (
	GuestDir   = "/pmjail"  // bootstrap code
	JobDir     = "/job"     // the job's own files
	RuntimeDir = "/runtime" // runtime binaries and assets
	TmpDir     = "/tmp"     // the only writable place
	// ScratchDir is a JavaScript guest's own writable directory on the
	// run's /tmp (its TMPDIR): the rest of /tmp holds the runtime's
	// DENO_DIR.
	ScratchDir = TmpDir + "/scratch"

	// The guest channel's FIFOs (see ipc/PROTOCOL.md), made by the jail's
	// init stage: the guest reads ChannelIn and writes ChannelOut.
	ChannelDir = GuestDir + "/channel"
	ChannelIn  = ChannelDir + "/in"
	ChannelOut = ChannelDir + "/out"

	// StdinFile holds the job's standard input, when it gives one: the
	// init stage opens it as the runtime's fd 0.
	StdinFile = GuestDir + "/stdin"
)
