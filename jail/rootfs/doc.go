// Package rootfs describes what a job's root holds: the program, the
// libraries the dynamic loader loads for it (found by following the
// loader's own search, see SharedLibraries), the launch's binds and
// copies, four devices, a fresh /proc and a size-capped /tmp, and the
// process's ids and rlimits.
//
// NewSpec only describes, as an OCI spec the init stage sets up; it
// writes nothing. Link is the one call that writes: it keeps trees of
// hard links to libraries in a state directory, so that a root binds a
// library directory instead of each library, and PruneLinks removes the
// trees no run will name again.
package rootfs
