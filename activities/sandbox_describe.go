package activities

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// describeSandboxRun is run as the person who decides reads it, at most
// capBytes long: a first line that says it ran in the sandbox, how it
// ended and how many files it changed; a line per change; each text
// change's diff; and the output's start and end. The worker writes it into
// the run (SandboxRun.Preview), so that a replay shows the same words.
func describeSandboxRun(run protocol.SandboxRun, capBytes int) string {
	var b strings.Builder
	n := len(run.Changes)
	fmt.Fprintf(&b, "ran in the sandbox (no network; it wrote only to a copy of the workspace): %s, %d %s changed\n",
		sandboxEnd(run), n, text.Plural(n, "file"))
	if run.TooLarge != "" {
		fmt.Fprintf(&b, "an approve applies nothing: %s\n", run.TooLarge)
	}
	// The list of changes comes whole or says how many it leaves out: a
	// change cut from the end of the preview would be one the person never
	// sees and an approve still applies. It may take two thirds of the cap.
	listCap := capBytes * 2 / 3
	for i, c := range run.Changes {
		line := changeLine(c) + "\n"
		if capBytes > 0 && b.Len()+len(line) > listCap {
			left := n - i
			fmt.Fprintf(&b, "  … and %d more %s, not listed here (the console lists every one, and an approve applies every one)\n", left, text.Plural(left, "change"))
			break
		}
		b.WriteString(line)
	}
	for _, c := range run.Changes {
		if c.Diff != "" {
			fmt.Fprintf(&b, "--- %s\n%s\n", shownPath(c.Path), c.Diff)
		}
	}
	for _, o := range run.Omitted {
		fmt.Fprintf(&b, "  not applied: %s\n", o)
	}
	if out := strings.TrimRight(run.Output, "\n"); out != "" {
		fmt.Fprintf(&b, "output:\n%s\n", out)
	} else {
		b.WriteString("output: none\n")
	}
	const cut = "\n… (cut: the changes hold the rest)"
	s := strings.ToValidUTF8(b.String(), "\uFFFD")
	if capBytes > 0 && len(s) > capBytes {
		s = text.Cut(s, capBytes-len(cut)) + cut
	}
	return s
}

// sandboxEnd says how a sandboxed run ended.
func sandboxEnd(run protocol.SandboxRun) string {
	switch {
	case run.TimedOut:
		return "timed out, killed with all it started"
	case run.Signal != "":
		return "killed by " + run.Signal
	default:
		return fmt.Sprintf("exit %d", run.ExitCode)
	}
}

// changeLine is one line of the change list: what happened to which file.
func changeLine(c protocol.FileChange) string {
	what := c.Op + " " + shownPath(c.Path)
	if c.Op == protocol.ChangeRenamed {
		what = fmt.Sprintf("renamed %s → %s", shownPath(c.From), shownPath(c.Path))
	}
	switch {
	case c.Kind == "dir":
		what += "/ (folder)"
	case c.Kind == "symlink":
		what += " (symbolic link to " + shownPath(c.Link) + ")"
	case c.Op == protocol.ChangeDeleted:
	case c.Binary:
		what += fmt.Sprintf(" (binary, %d bytes)", c.Size)
	default:
		what += fmt.Sprintf(" (%d bytes)", c.Size)
	}
	return "  " + what
}

// shownPath is path as the change list shows it: quoted, with its escapes,
// when it holds a character that is not printable (a newline in a file's
// name would start a line of its own, and could fake one of the list).
func shownPath(path string) string {
	for _, r := range path {
		if !unicode.IsPrint(r) {
			return strconv.Quote(path)
		}
	}
	return path
}
