package activities

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// maxLinks bounds how many symbolic links realPath follows, so that a loop of
// links ends in an error instead of spinning.
const maxLinks = 40

// workspace is the folder the tools are confined to, as one tool call sees it.
//
// Confinement has two layers. resolve checks a path before it is used and
// says in plain words why it is refused; the checked path is then opened
// through root, an os.Root, which refuses at the system call level anything
// that leaves the folder, so that a symbolic link swapped in between the
// check and the use cannot lead outside either.
type workspace struct {
	given string // the configured folder, absolute and clean
	real  string // the same with every symbolic link resolved
	root  *os.Root
}

// openWorkspace opens dir for one tool call. The caller closes it.
func openWorkspace(dir string) (*workspace, error) {
	ws, err := findWorkspace(dir)
	if err != nil {
		return nil, err
	}
	ws.root, err = os.OpenRoot(ws.real)
	if err != nil {
		return nil, fmt.Errorf("workspace %q is not usable: %w", dir, pathErr(err))
	}
	return ws, nil
}

// findWorkspace is where dir is, as configured and as resolved, without
// opening it (its root is nil): what checking a call's paths takes.
func findWorkspace(dir string) (*workspace, error) {
	if dir == "" {
		return nil, errors.New("no workspace is configured")
	}
	given, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("workspace %q: %w", dir, err)
	}
	// The workspace itself may be reached through a link (/tmp is one on
	// some systems); paths are compared with where it really is.
	real, err := filepath.EvalSymlinks(given)
	if err != nil {
		return nil, fmt.Errorf("workspace %q is not usable: %w", dir, pathErr(err))
	}
	return &workspace{given: given, real: real}, nil
}

func (w *workspace) Close() error { return w.root.Close() }

// roots are the workspace's spellings: as configured and as resolved.
func (w *workspace) roots() []string { return WorkspaceRoots(w.given, w.real) }

// WorkspaceRoots lists the spellings of a workspace folder, as configured
// (given) and as resolved (real), without repeating one: what
// NormalizeArguments takes paths inside of.
func WorkspaceRoots(given, real string) []string {
	if given == real || real == "" {
		return []string{given}
	}
	return []string{given, real}
}

// resolve turns path, the value of the argument named arg, into a path
// relative to the real workspace that contains no symbolic links, for use
// with w.root. A relative path is relative to the workspace; an absolute one
// must lie inside it, spelled either as configured or as resolved. The error
// names the argument and the path as the tool received it (normalized:
// relative to the workspace).
func (w *workspace) resolve(arg, path string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is empty", arg)
	}
	p := filepath.Clean(path)
	if !filepath.IsAbs(p) {
		p = filepath.Join(w.real, p)
	}
	if !within(w.real, p) && !within(w.given, p) {
		return "", fmt.Errorf("%s %q is outside the workspace", arg, path)
	}
	rel, err := filepath.Rel(w.real, p)
	if err != nil || !filepath.IsLocal(rel) {
		// An absolute path spelled with the workspace as configured.
		if rel, err = filepath.Rel(w.given, p); err != nil {
			return "", fmt.Errorf("%s %q is outside the workspace", arg, path)
		}
	}
	real, err := realRelative(w.real, filepath.ToSlash(rel))
	if err != nil {
		return "", fmt.Errorf("%s %q %w", arg, path, err)
	}
	return filepath.FromSlash(real), nil
}

// realRelative gives rel, a clean path relative to the workspace whose
// real location (every link resolved) is real, with every symbolic link on
// its way followed, relative to real too: the file a tool that opens rel
// reaches. A link that leads out of the workspace is refused, naming where
// it leads. Both paths are written with slashes.
func realRelative(real, rel string) (string, error) {
	resolved, err := realPath(filepath.Join(real, filepath.FromSlash(rel)))
	if err != nil {
		return "", fmt.Errorf("cannot be resolved: %w", pathErr(err))
	}
	out, err := filepath.Rel(real, resolved)
	if err != nil || !filepath.IsLocal(out) {
		return "", fmt.Errorf("%w: a symbolic link leads to %q", errOutsideWorkspace, resolved)
	}
	return filepath.ToSlash(out), nil
}

// within reports whether the clean absolute path p is dir or lies below it.
func within(dir, p string) bool {
	rel, err := filepath.Rel(dir, p)
	return err == nil && filepath.IsLocal(rel)
}

// realPath resolves every symbolic link in the clean absolute path p, also
// when p does not exist yet: the longest prefix that exists is resolved with
// filepath.EvalSymlinks and the rest is appended as it is. A dangling link is
// followed to where it points, because writing through it would create the
// file there.
//
// The prefix is found from the root down, stopping at the first name that
// is not there, so that what it costs follows the folders that exist, not
// the length of the path: this runs in a workflow task (the turn's vetting
// SideEffect), where a model's 100 KB path of a/a/a/… that does not exist,
// walked up one name at a time and joined again at each, took seconds, and
// the task failed as deadlocked on every attempt.
func realPath(p string) (string, error) {
	for range maxLinks {
		existing, rest := existingPrefix(p)
		real, err := filepath.EvalSymlinks(existing)
		if err == nil {
			return filepath.Join(real, rest), nil
		}
		// existing exists but does not resolve: it is a dangling link (or a
		// loop of links, which maxLinks ends).
		target, lerr := os.Readlink(existing)
		if lerr != nil {
			return "", err
		}
		if !filepath.IsAbs(target) {
			target = filepath.Join(filepath.Dir(existing), target)
		}
		p = filepath.Join(target, rest)
	}
	return "", errors.New("too many levels of symbolic links")
}

// existingPrefix splits the clean absolute path p into its longest prefix
// that exists (lstat: a link counts as itself) and the rest, relative to
// it. A prefix after one that does not exist cannot exist either (p has no
// ".."), so the names are looked at from the root down, and each Lstat
// costs the walk of what exists.
func existingPrefix(p string) (existing, rest string) {
	existing = p[:len(filepath.VolumeName(p))+1] // the root
	for i := len(existing); i < len(p); {
		j := strings.IndexByte(p[i:], filepath.Separator)
		end := len(p)
		if j >= 0 {
			end = i + j
		}
		if _, err := os.Lstat(p[:end]); err != nil {
			return existing, p[i:]
		}
		existing, i = p[:end], end+1
	}
	return existing, ""
}

// pathErr drops the operation and path from a *fs.PathError: they name the
// path as the system call saw it (relative to the workspace's real location),
// while messages name it as the model wrote it.
func pathErr(err error) error {
	var pe *os.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}
