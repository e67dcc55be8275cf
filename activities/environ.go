package activities

import (
	"os"

	"golang.org/x/sys/unix"
)

// BaseEnv are the variables of the worker's environment that every program
// the worker starts for a tool gets (a Bash command, a stdio MCP server):
// what a program needs to run, none of the worker's secrets (the model's
// key, the link secret, the database's and the payload store's
// credentials). The MCP SDKs for TypeScript and Python pass the same few.
var BaseEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "TMPDIR", "LANG", "TZ"}

// allowedEnv is the environment of a program the worker starts: the
// variables of BaseEnv and then of extra that the worker's environment
// has, each once, and nothing else of it.
func allowedEnv(extra []string) []string {
	var env []string
	seen := map[string]bool{}
	for _, names := range [][]string{BaseEnv, extra} {
		for _, name := range names {
			if v, ok := os.LookupEnv(name); ok && !seen[name] {
				seen[name] = true
				env = append(env, name+"="+v)
			}
		}
	}
	return env
}

// HideWorker makes the calling process (the worker) not dumpable (prctl
// PR_SET_DUMPABLE 0), so that a process of the same user, a Bash command
// or an MCP server, can neither read its environment (/proc/PID/environ:
// the secrets commands are not given) or memory nor attach a debugger to
// it. The worker's children are dumpable again once they exec. Root reads
// them all the same: run the worker as an unprivileged user.
func HideWorker() error {
	return unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
}
