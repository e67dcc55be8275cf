//go:build !race

package policy

// raceDetector is true in a build with the race detector, which makes
// cel-go several times slower.
const raceDetector = false
