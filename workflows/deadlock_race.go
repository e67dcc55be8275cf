//go:build race

package workflows

import "time"

// deadlockTimeout is WorkerOptions' allowance of a workflow task in a
// build with the race detector, ten times a normal build's: see
// WorkerOptions.
const deadlockTimeout = 50 * time.Second
