package api

import _ "embed"

// OpenAPI is the OpenAPI 3.1 document of the socket API, with the JSON
// Schema (2020-12) of the job, the result, the events, the errors, the
// health body and the daemon's config file. The daemon serves it at
// GET /v1/openapi.json; a test holds it to the Go types that cross the
// socket, and the integration suite validates every body against it.
//
//go:embed openapi.json
var OpenAPI []byte
