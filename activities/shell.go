package activities

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

const (
	// heartbeatEvery is how often a running Bash command heartbeats when the
	// activity has no heartbeat timeout; heartbeats are also how an activity
	// learns that it was cancelled.
	heartbeatEvery = 5 * time.Second
	// pipeGrace is how long Bash waits, after its guard exited, for the
	// command's output to close (every process that held it is dead by
	// then, unless the command killed its guard where no PID namespace
	// holds it).
	pipeGrace = time.Second
)

// Bash runs a command with bash -c in the workspace and answers its combined
// output. The command and every process it started are killed when it
// times out, when the activity is cancelled and when the worker dies.
func (t *Tools) Bash(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, protocol.ToolBash, in, func(ws *workspace, in ToolInput) (string, error) {
		command, timeout, err := t.bashArgs(in.Call.Arguments)
		if err != nil {
			return "", err
		}
		return runBash(ctx, ws.real, command, allowedEnv(t.BashEnv), timeout, t.outputCap())
	})
}

// bashArgs reads a Bash call's arguments: the command, and how long it may
// run (the call's timeout, at most the configured one). Its errors are
// written for the model to correct its call.
func (t *Tools) bashArgs(arguments string) (command string, timeout time.Duration, err error) {
	var args struct {
		Command *string  `json:"command"`
		Timeout *float64 `json:"timeout"`
	}
	if err := decodeArgs(arguments, &args); err != nil {
		return "", 0, err
	}
	if args.Command == nil {
		return "", 0, missing("command")
	}
	if strings.TrimSpace(*args.Command) == "" {
		return "", 0, errors.New("command is empty")
	}
	timeout = t.bashTimeout()
	if args.Timeout != nil {
		if *args.Timeout <= 0 {
			return "", 0, fmt.Errorf("timeout must be a positive number of milliseconds, not %v", *args.Timeout)
		}
		if ms := *args.Timeout; ms < float64(timeout/time.Millisecond) {
			timeout = time.Duration(ms * float64(time.Millisecond))
		}
	}
	return *args.Command, timeout, nil
}

// runBash runs command in dir with the environment env. A command that fails, is killed or times out
// is an error whose message carries the output. When it times out or ctx
// ends, its guard kills it and everything it started (see guard.go).
func runBash(ctx context.Context, dir, command string, env []string, timeout time.Duration, capBytes int) (string, error) {
	runCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	out := &capWriter{max: capBytes}
	g, err := startGuarded(runCtx, dir, command, env, out)
	if err != nil {
		return "", err
	}
	end, err := g.waitHeartbeating(ctx)

	switch status := end.Status; {
	case ctx.Err() != nil:
		// The activity itself was cancelled or timed out; run reports it.
		return "", ctx.Err()
	case runCtx.Err() != nil:
		return "", fmt.Errorf("command timed out after %s\n\n%s", text.Duration(timeout), out)
	case end.Reported && status.Signaled():
		return "", fmt.Errorf("command was terminated (signal: %s)\n\n%s", status.Signal(), out)
	case end.Reported && status.ExitStatus() != 0:
		return "", fmt.Errorf("command failed with exit code %d\n\n%s", status.ExitStatus(), out)
	case err != nil && !(end.Reported && errors.Is(err, exec.ErrWaitDelay)):
		// The guard failed (it says why in the output) or was killed.
		return "", fmt.Errorf("command failed: %w\n\n%s", err, out)
	case end.Left:
		// What it started ends with the call, as at its time limit: a
		// command's effects are what ran while it ran.
		return out.String() + "\n(the command left processes running in the background; they were stopped when it ended)", nil
	}
	if out.Len() == 0 {
		return "(no output)", nil
	}
	return out.String(), nil
}

// waitHeartbeating is wait, with the activity of ctx heartbeating
// meanwhile.
func (g *guardedCommand) waitHeartbeating(ctx context.Context) (guardEnd, error) {
	stop := heartbeat(ctx)
	defer stop()
	return g.wait()
}
