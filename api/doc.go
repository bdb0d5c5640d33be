// Package api is v1 of pmjail's socket contract: every type that crosses
// the daemon's Unix socket (the job a client sends, the result, the events
// of a streamed run, the error bodies, the health) and nothing else. It
// imports only the standard library, so that a client of any platform can
// build it without cgo; the server and the engine convert to and from it
// at their edges. server/API.md is its prose, openapi.json (OpenAPI 3.1,
// embedded as OpenAPI) its schema, held to these types by a test.
package api
