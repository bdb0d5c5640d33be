// Package runtimes owns the guest runtimes pmjail runs: Deno for JavaScript
// and TypeScript, Pyodide (CPython on WebAssembly, loaded inside Deno) for
// Python. For each it knows where the pinned files are installed, the locked
// down command line, the scrubbed environment, the guest bootstrap code and
// which host files the jail must bind into the job's root. It starts no jail
// itself: it describes a Launch, and package jail carries it out; the warm
// runs that build Deno's caches go through a Warmer the supervisor supplies.
package runtimes
