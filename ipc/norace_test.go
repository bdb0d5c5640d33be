//go:build !race

package ipc

// raceSlack is 0 without the race detector (see race_test.go).
const raceSlack = 0
