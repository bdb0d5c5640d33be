// Package client is the Go client of pmjail's socket API (see
// server/API.md): it sends job objects to a `pmjail serve` daemon over its
// Unix socket and returns the result objects, optionally streaming the
// run's output and logs as they happen. The wire types are package api's,
// the only pmjail package it imports.
package client
