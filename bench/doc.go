// Package bench measures tollgate against the raw Temporal floor: `make
// bench` runs BenchmarkTollgate once and writes bench/RESULTS.md.
//
// It runs tollgate as a user does, from the outside: the worker and the API
// are the binaries of this tree, started as processes of their own against
// a tuned dev server, and everything it reports about them comes from their
// public surface: POST /chat/stream, GET /chat/turns/:turnId/events and POST
// /chat/approval for the latencies, GET /metrics of the API and the worker
// for queries, streams, pollers, CPU and memory, and the workflows'
// histories in Temporal for where the time goes. The floor is the baseline,
// not tollgate: a minimal workflow on an SDK worker in the benchmark's own
// process, read the way the API reads a turn.
//
// The figures are ratios and per-unit costs measured in one run on one
// machine; no test asserts a time.
package bench
