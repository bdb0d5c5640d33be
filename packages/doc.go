// Package packages is the operator's store of vetted packages: npm
// tarballs and pure-Python wheels, added at operator time (never from a
// job), unpacked read-only in the state directory, and offered to jobs as
// a view that holds exactly the packages a job may use. A Deno guest
// resolves npm:NAME@X.Y.Z from the view as from Deno's own npm cache
// (DENO_DIR, --cached-only, no network); a Pyodide guest finds the wheels'
// files on sys.path. It depends on the standard library alone.
package packages
