//go:build race

package chaos

// raceEnabled: the test runs with -race, so the daemon is built with it too.
const raceEnabled = true
