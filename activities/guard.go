package activities

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"syscall"
)

// guardScript waits for one line on its standard input. "done" means the
// command ended while its worker lived; anything else (end of file: the
// worker died, however it died, and the pipe's write end with it) kills the
// command's process group, given as $1.
const guardScript = `read -r word; [ "$word" = done ] || kill -KILL -- "-$1" 2>/dev/null`

// groupGuard kills a command's process group if the worker dies while the
// command runs. The command has a process group of its own, so that its time
// limit ends all of it; a SIGKILLed worker reaches none of it, and a
// parent-death signal would end bash but not what bash started. Without the
// guard, a command the turn has reported as not completed would go on
// writing to the workspace.
type groupGuard struct {
	cmd  *exec.Cmd
	done io.WriteCloser
}

// guardGroup starts the guard of process group pgid. The guard has a group
// of its own too, so that a signal to the worker's group (^C in a terminal)
// does not end it first.
func guardGroup(pgid int) (*groupGuard, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("cannot guard the command: %w", err)
	}
	defer r.Close()
	cmd := exec.Command("bash", "-c", guardScript, "tollgate-bash-guard", strconv.Itoa(pgid))
	cmd.Stdin = r
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, fmt.Errorf("cannot guard the command: %w", err)
	}
	return &groupGuard{cmd: cmd, done: w}, nil
}

// release tells the guard that the command ended and waits for it to exit.
func (g *groupGuard) release() {
	_, _ = io.WriteString(g.done, "done\n")
	_ = g.done.Close()
	_ = g.cmd.Wait()
}
