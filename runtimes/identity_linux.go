package runtimes

import (
	"os"
	"syscall"
)

// FileIdentity names one version of one file: its inode, and its change
// time, which any write, chmod or rename moves (at the kernel's timestamp
// granularity: fine-grained once the file was stat'ed, on recent kernels)
// and no caller can set back.
type FileIdentity struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	CtimeNs int64  `json:"ctime_ns"`
}

// identityOf is the identity of the file fi describes, when the platform
// tells.
func identityOf(fi os.FileInfo) (FileIdentity, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return FileIdentity{}, false
	}
	return FileIdentity{Dev: st.Dev, Ino: st.Ino, CtimeNs: st.Ctim.Nano()}, true
}
