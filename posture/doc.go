// Package posture owns pmjail's account of what protects a run: probes that
// prove each hardening layer on this host by trying it in a throwaway
// child, the decision of mode auto (run with what is present, say what is
// missing) and mode required (refuse unless the containment core is
// present), and the per-run posture built from the contained process's real
// state as read back from /proc. A layer counts as applied only when a probe
// or the run itself proved it, never because a setting asked for it.
package posture
