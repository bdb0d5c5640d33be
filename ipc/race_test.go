//go:build race

package ipc

// raceSlack widens the tests' heap bounds under the race detector, whose
// instrumentation allocates beside what the code under test holds.
const raceSlack = 16 << 20
