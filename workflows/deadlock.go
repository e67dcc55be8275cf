//go:build !race

package workflows

import "time"

// deadlockTimeout is how long a workflow task may run without yielding
// before the SDK's deadlock detector fails it (WorkerOptions).
const deadlockTimeout = 5 * time.Second
