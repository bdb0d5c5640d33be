// Package server owns pmjail's daemon: the HTTP/1.1 + JSON API on a Unix
// socket (POST /v1/runs, GET /v1/posture, /v1/health, /v1/openapi.json,
// /metrics; see API.md), the operator's config and the ceiling it sets,
// the authorisation of every peer by SO_PEERCRED, back-pressure (a bounded
// number of concurrent runs and a bounded queue), metrics, and the systemd
// integration (socket activation, sd_notify, watchdog). Runs themselves go
// through one job.Runner for the daemon's life.
package server
