package activities

import "os"

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
