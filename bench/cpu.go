package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// cpuTimes is the CPU time used so far by each process of a run: the
// benchmark's own (the floor's worker, the scripted model, the clients),
// tollgate's worker and API, and the Temporal server (the last three from
// /proc; the server's -1 where /proc cannot tell).
type cpuTimes struct {
	bench, worker, api, server time.Duration
}

// sub is the CPU time used between before and t.
func (t cpuTimes) sub(before cpuTimes) cpuTimes {
	d := cpuTimes{bench: t.bench - before.bench, worker: t.worker - before.worker, api: t.api - before.api, server: -1}
	if t.server >= 0 && before.server >= 0 {
		d.server = t.server - before.server
	}
	return d
}

// add is t and u together.
func (t cpuTimes) add(u cpuTimes) cpuTimes {
	d := cpuTimes{bench: t.bench + u.bench, worker: t.worker + u.worker, api: t.api + u.api, server: -1}
	if t.server >= 0 && u.server >= 0 {
		d.server = t.server + u.server
	}
	return d
}

// ours is the CPU time of every process but the dev server's.
func (t cpuTimes) ours() time.Duration { return t.bench + t.worker + t.api }

// div divides every figure by n.
func (t cpuTimes) div(n int) cpuTimes {
	d := time.Duration(n)
	out := cpuTimes{bench: t.bench / d, worker: t.worker / d, api: t.api / d, server: -1}
	if t.server >= 0 {
		out.server = t.server / d
	}
	return out
}

// readCPU reads the CPU time of every process of e. tollgate's worker and
// API are read from /proc, as their process_cpu_seconds_total is, but
// without a scrape: a scrape costs the worker several milliseconds of CPU
// (and the benchmark as many to parse), which one turn at a time, read
// every 10 turns (loadOrder), would weigh on the figures it reads. Where e
// has no processes of tollgate's to read, their GET /metrics tell.
func (e *env) readCPU(ctx context.Context) (cpuTimes, error) {
	t := cpuTimes{bench: selfCPU(), server: -1}
	if e.serverCPU != nil {
		t.server = e.serverCPU()
	}
	if e.tollgateCPU != nil {
		if t.worker, t.api = e.tollgateCPU(); t.worker >= 0 && t.api >= 0 {
			return t, nil
		}
	}
	w, err := e.worker.read(ctx)
	if err != nil {
		return t, err
	}
	a, err := e.apiMetrics.read(ctx)
	if err != nil {
		return t, err
	}
	t.worker, t.api = w.cpu(), a.cpu()
	return t, nil
}

// selfCPU is the CPU time this process has used.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// processCPU is the CPU time process pid has used, from /proc, or -1.
func processCPU(pid int) time.Duration {
	if pid == 0 {
		return -1
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	// Fields after the command's closing parenthesis; utime and stime are
	// the 14th and 15th of the whole line, in clock ticks of 1/100 s.
	_, rest, _ := strings.Cut(string(b), ") ")
	f := strings.Fields(rest)
	if len(f) < 13 {
		return -1
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond
}

// groupCPU is the CPU time the processes of process group pgid have used,
// from /proc: a PostgreSQL server's postmaster and its backends (whose
// time is lost from the sum when one exits: a pooled connection's lasts).
func groupCPU(pgid int) time.Duration {
	var sum time.Duration
	processes(func(pid int, read func(string) string) bool {
		_, rest, _ := strings.Cut(read("stat"), ") ")
		// The process group is the 5th field of the whole line.
		if f := strings.Fields(rest); len(f) > 2 && f[2] == strconv.Itoa(pgid) {
			if c := processCPU(pid); c > 0 {
				sum += c
			}
		}
		return true
	})
	return sum
}

// findServerPID finds the dev server listening on hostPort by its command
// line, or returns 0.
func findServerPID(hostPort string) int {
	_, port, _ := strings.Cut(hostPort, ":")
	found := 0
	processes(func(pid int, read func(string) string) bool {
		args := strings.Split(read("cmdline"), "\x00")
		if slices.Contains(args, "start-dev") && slices.Contains(args, port) && slices.Contains(args, "--port") {
			found = pid
		}
		return found == 0
	})
	return found
}

// processes calls fn with each process in /proc and a reader of its files
// ("" for one that cannot be read), until fn returns false.
func processes(fn func(pid int, read func(name string) string) bool) {
	dirs, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, d := range dirs {
		pid, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		read := func(name string) string {
			b, _ := os.ReadFile(filepath.Join("/proc", d.Name(), name))
			return string(b)
		}
		if !fn(pid, read) {
			return
		}
	}
}

// loadAverage is the machine's one-minute load average, or "" where
// /proc/loadavg does not exist.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	return strings.Fields(string(b))[0]
}

// cpuModel names the processor, where /proc/cpuinfo says.
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	for line := range strings.Lines(string(b)) {
		if name, ok := strings.CutPrefix(line, "model name"); ok {
			return strings.TrimSpace(strings.TrimLeft(name, "\t :"))
		}
	}
	return "unknown CPU"
}
