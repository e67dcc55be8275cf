package activities

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// SandboxApplyInput is the input of ApplySandbox: the Bash call, and what it
// did when it ran in the sandbox (SandboxBash).
type SandboxApplyInput struct {
	Call protocol.ToolCall   `json:"call"`
	Run  protocol.SandboxRun `json:"run"`
	// Ledger are rows of the audit ledger that the activity writes while
	// it applies the changes, for its turn (carry).
	Ledger []audit.Record `json:"ledger,omitempty"`
}

func (in SandboxApplyInput) carried() []audit.Record { return in.Ledger }

// appliedNames bounds the paths the answer names of those applied, and of
// those refused; the rest are counted.
const appliedNames = 20

// ApplySandbox applies a sandboxed run's changes to the workspace, exactly
// those, without running the command again, and answers the model as Bash
// would have (its exit code, its output), with a line that says what was
// applied and what was refused, and why. A file whose workspace copy
// changed since the command ran (its Before hash), or an added file that
// exists now, is refused, and the others are still applied. A run that is
// TooLarge applies nothing. Every file is written through the workspace's
// os.Root, never through a symbolic link or a folder that became one, and
// replaced by a rename, never written in place (a hard link to a file
// elsewhere keeps that file as it was).
func (t *Tools) ApplySandbox(ctx context.Context, in SandboxApplyInput) (ToolOutput, error) {
	if err := ctx.Err(); err != nil {
		return ToolOutput{}, err
	}
	run := in.Run
	if run.Unavailable != "" {
		return ToolOutput{Status: protocol.StatusError, Result: protocol.ToolBash + ": the command did not run in the sandbox, and nothing is applied: " + run.Unavailable}, nil
	}
	var applied protocol.SandboxApplied
	var line string
	if run.TooLarge != "" {
		line = "Nothing was applied to the workspace: the command's changes are too large to apply from the sandbox (" + run.TooLarge + ")."
	} else if ws, err := openWorkspace(t.Workspace); err != nil {
		line = "Nothing was applied to the workspace: " + err.Error() + "."
	} else {
		applied = applyChanges(ws.root, run.Changes)
		ws.Close()
		line = appliedLine(applied, run)
	}
	out := ToolOutput{Status: protocol.StatusOK, Applied: &applied}
	switch {
	case run.TimedOut:
		limit := "its time limit"
		if _, timeout, err := t.bashArgs(in.Call.Arguments); err == nil {
			limit = text.Duration(timeout)
		}
		out.Status, out.Result = protocol.StatusError, fmt.Sprintf("%s: command timed out after %s\n\n%s", protocol.ToolBash, limit, run.Output)
	case run.Signal != "":
		out.Status, out.Result = protocol.StatusError, fmt.Sprintf("%s: command was terminated (signal: %s)\n\n%s", protocol.ToolBash, run.Signal, run.Output)
	case run.ExitCode != 0:
		out.Status, out.Result = protocol.StatusError, fmt.Sprintf("%s: command failed with exit code %d\n\n%s", protocol.ToolBash, run.ExitCode, run.Output)
	default:
		out.Result = run.Output
	}
	if len(applied.Conflicts) > 0 || run.TooLarge != "" {
		out.Status = protocol.StatusError
	}
	out.Result += "\n\n" + line
	return out, nil
}

// appliedLine says, for the model, what applying run's changes did.
func appliedLine(a protocol.SandboxApplied, run protocol.SandboxRun) string {
	var b strings.Builder
	switch {
	case len(run.Changes) == 0:
		b.WriteString("The command changed no file in the workspace.")
	case len(a.Conflicts) == 0:
		fmt.Fprintf(&b, "Applied to the workspace: %s.", names(a.Applied))
	default:
		if len(a.Applied) > 0 {
			fmt.Fprintf(&b, "Applied to the workspace: %s. ", names(a.Applied))
		}
		fmt.Fprintf(&b, "Refused, because the workspace changed after the command ran: %s.", names(a.Conflicts))
	}
	if len(run.Omitted) > 0 {
		fmt.Fprintf(&b, " Not applied, as they are not files: %s.", names(run.Omitted))
	}
	return b.String()
}

// names lists ps, at most appliedNames of them.
func names(ps []string) string {
	if len(ps) <= appliedNames {
		return strings.Join(ps, ", ")
	}
	more := len(ps) - appliedNames
	return fmt.Sprintf("%s and %d more", strings.Join(ps[:appliedNames], ", "), more)
}

// applier applies changes to a workspace.
type applier struct {
	root *os.Root
	done protocol.SandboxApplied
}

// applyChanges applies changes to the workspace root: first the files
// deleted and renamed away, then the folders deleted, deepest first, then
// what is added, changed and renamed to, shallowest first, so that a
// folder is empty before it is deleted and made before a file in it is.
func applyChanges(root *os.Root, changes []protocol.FileChange) protocol.SandboxApplied {
	a := &applier{root: root}
	moved := map[int]bool{} // renames whose file was taken from From
	changes = slices.DeleteFunc(slices.Clone(changes), func(c protocol.FileChange) bool {
		for _, p := range []string{c.Path, c.From} {
			if p != "" && (!filepath.IsLocal(p) || path.Clean(p) != p || p == ".") {
				a.refuse(c.Path, "not a clean path inside the workspace")
				return true
			}
		}
		return false
	})
	for i, c := range changes {
		switch {
		case c.Op == protocol.ChangeDeleted && c.Kind != "dir":
			if a.remove(c.Path, c.Before) {
				a.done.Applied = append(a.done.Applied, c.Path)
			}
		case c.Op == protocol.ChangeRenamed:
			// Path must be free, and reachable, before From is taken.
			if !a.parents(c.Path, mayLack) || !a.check(c.Path, "") {
				continue
			}
			moved[i] = a.remove(c.From, c.Before)
		}
	}
	depth := func(p string) int { return strings.Count(p, "/") }
	var dirs, writes []int
	for i, c := range changes {
		switch {
		case c.Op == protocol.ChangeDeleted && c.Kind == "dir":
			dirs = append(dirs, i)
		case c.Op == protocol.ChangeAdded, c.Op == protocol.ChangeChanged, c.Op == protocol.ChangeRenamed && moved[i]:
			writes = append(writes, i)
		}
	}
	slices.SortStableFunc(dirs, func(i, j int) int { return depth(changes[j].Path) - depth(changes[i].Path) })
	slices.SortStableFunc(writes, func(i, j int) int { return depth(changes[i].Path) - depth(changes[j].Path) })
	for _, i := range dirs {
		if a.removeDir(changes[i].Path) {
			a.done.Applied = append(a.done.Applied, changes[i].Path)
		}
	}
	for _, i := range writes {
		if a.write(changes[i]) {
			a.done.Applied = append(a.done.Applied, changes[i].Path)
		}
	}
	return a.done
}

// refuse records that the change to p was refused, for why.
func (a *applier) refuse(p, why string) {
	a.done.Conflicts = append(a.done.Conflicts, p+" ("+why+")")
}

// remove deletes the file or link p if it is still what the command saw
// (before).
func (a *applier) remove(p, before string) bool {
	if !a.parents(p, mustHave) || !a.check(p, before) {
		return false
	}
	if err := a.root.Remove(p); err != nil {
		a.refuse(p, pathErr(err).Error())
		return false
	}
	return true
}

// removeDir deletes the folder p, if it is one and empty now.
func (a *applier) removeDir(p string) bool {
	if !a.parents(p, mustHave) {
		return false
	}
	info, err := a.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		a.refuse(p, "it is no longer there")
		return false
	case err != nil:
		a.refuse(p, pathErr(err).Error())
		return false
	case !info.IsDir():
		a.refuse(p, "it is no longer a folder")
		return false
	}
	if err := a.root.Remove(p); err != nil {
		if errors.Is(err, syscall.ENOTEMPTY) || errors.Is(err, syscall.EEXIST) {
			a.refuse(p, "the folder holds files the command did not delete, or whose deletion was refused")
		} else {
			a.refuse(p, pathErr(err).Error())
		}
		return false
	}
	return true
}

// write makes c's file, link or folder at c.Path, making the folders on its
// way.
func (a *applier) write(c protocol.FileChange) bool {
	before := c.Before
	if c.Op == protocol.ChangeRenamed {
		before = "" // From was checked; Path must be free
	}
	if !a.parents(c.Path, makeMissing) || !a.check(c.Path, before) {
		return false
	}
	var err error
	switch c.Kind {
	case "dir":
		if err = a.root.Mkdir(c.Path, 0o700); err == nil {
			err = a.root.Chmod(c.Path, fs.FileMode(c.Mode).Perm())
		}
	case "symlink":
		err = a.replace(c.Path, func(tmp string) error { return a.root.Symlink(c.Link, tmp) })
	default:
		err = a.replace(c.Path, func(tmp string) error {
			f, err := a.root.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err != nil {
				return err
			}
			_, err = f.Write(c.Content)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err == nil {
				err = a.root.Chmod(tmp, fs.FileMode(c.Mode).Perm())
			}
			return err
		})
	}
	if err != nil {
		a.refuse(c.Path, pathErr(err).Error())
		return false
	}
	return true
}

// replace makes p with create, under a temporary name next to it, and then
// renames it to p, replacing what p is (a file, or a link, never followed).
func (a *applier) replace(p string, create func(tmp string) error) error {
	var nonce [8]byte
	_, _ = rand.Read(nonce[:])
	tmp := path.Join(path.Dir(p), ".tollgate-apply-"+hex.EncodeToString(nonce[:]))
	if err := create(tmp); err != nil {
		_ = a.root.Remove(tmp)
		return err
	}
	if err := a.root.Rename(tmp, p); err != nil {
		_ = a.root.Remove(tmp)
		return err
	}
	return nil
}

// check reports whether p is still as the command saw it: with the Before
// hash before, or absent when before is empty; otherwise the change to p
// is refused. The folders on its way have been checked (parents).
func (a *applier) check(p, before string) bool {
	now, err := a.identity(p)
	switch {
	case err != nil:
		a.refuse(p, pathErr(err).Error())
		return false
	case before == "" && now != "":
		a.refuse(p, "it now exists in the workspace")
		return false
	case before != "" && now == "":
		a.refuse(p, "it is no longer there")
		return false
	case before == changedDuringRun:
		a.refuse(p, "it changed in the workspace while the command ran")
		return false
	case now != before:
		a.refuse(p, "it changed in the workspace after the command ran")
		return false
	}
	return true
}

// missingFolders is what parents does with a folder that is not there.
type missingFolders int

const (
	mustHave    missingFolders = iota // refuses the change
	mayLack                           // stops looking: p is absent
	makeMissing                       // makes it
)

// parents reports whether each folder on p's way is a folder (not a link
// to one), or is absent and missing allows it; otherwise the change to p
// is refused.
func (a *applier) parents(p string, missing missingFolders) bool {
	dir := path.Dir(p)
	if dir == "." {
		return true
	}
	prefix := ""
	for _, part := range strings.Split(dir, "/") {
		prefix = path.Join(prefix, part)
		info, err := a.root.Lstat(prefix)
		switch {
		case errors.Is(err, fs.ErrNotExist) && missing == mayLack:
			return true
		case errors.Is(err, fs.ErrNotExist) && missing == makeMissing:
			if err := a.root.Mkdir(prefix, 0o777); err != nil {
				a.refuse(p, pathErr(err).Error())
				return false
			}
		case err != nil:
			a.refuse(p, prefix+": "+pathErr(err).Error())
			return false
		case !info.IsDir():
			a.refuse(p, prefix+" is no longer a folder")
			return false
		}
	}
	return true
}

// identity is what p is now, as FileChange.Before says it: "" when absent,
// and a value no Before has for a folder or a special file.
func (a *applier) identity(p string) (string, error) {
	info, err := a.root.Lstat(p)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "", nil
	case err != nil:
		return "", err
	case info.Mode()&fs.ModeSymlink != 0:
		link, err := a.root.Readlink(p)
		if err != nil {
			return "", err
		}
		return linkIdentity(link), nil
	case !info.Mode().IsRegular():
		return "(" + info.Mode().Type().String() + ")", nil
	}
	f, err := a.root.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if opened, err := f.Stat(); err != nil || !os.SameFile(info, opened) {
		return "(changing)", err
	}
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
