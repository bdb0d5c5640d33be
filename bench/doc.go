// Command bench measures what a pmjail run costs an operator, side by side
// with the bare runtimes and with bubblewrap, and writes BENCHMARKS.md.
//
// Every comparison is interleaved (the variants take turns, the first of
// each round rotating) so that drift and noise from other load on the
// machine hit every side alike; each figure is a median with its min–max.
// Run it from the repository root as `make bench` (or `make soak` for the
// long soak); see BENCHMARKS.md for how to read the output.
package main
