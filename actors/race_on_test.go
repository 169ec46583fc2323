//go:build race

package actors

// raceEnabled: the race detector shadows memory, so RSS is no measure.
const raceEnabled = true
