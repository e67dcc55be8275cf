package protocol

import "slices"

// Bash sandbox modes (TOLLGATE_BASH_SANDBOX): what a protected Bash call
// does before a person is asked about it.
const (
	// SandboxOff: a Bash call runs only once a person approves it, as it
	// is, in the workspace (the default).
	SandboxOff = "off"
	// SandboxPreview: a protected Bash call first runs in the sandbox over
	// a copy-on-write view of the workspace; its approval request shows
	// what it changed, an approve applies exactly those changes, and a
	// decline discards them.
	SandboxPreview = "preview"
)

// File change operations (FileChange.Op).
const (
	ChangeAdded   = "added"
	ChangeChanged = "changed"
	ChangeDeleted = "deleted"
	ChangeRenamed = "renamed"
)

// SandboxRun is what a Bash command did when it ran in the sandbox: how it
// ended, what it printed, and every file it added, changed or deleted in
// the workspace's copy-on-write view. The workspace itself is untouched.
type SandboxRun struct {
	// Command is the command as it ran.
	Command string `json:"command"`
	// ExitCode is the command's exit status; -1 when it was killed (by
	// its time limit, or a signal: Signal says which).
	ExitCode int    `json:"exitCode"`
	Signal   string `json:"signal,omitempty"`
	// TimedOut is true when the command ran past its time limit and was
	// killed with everything it started.
	TimedOut bool `json:"timedOut,omitempty"`
	// Output is the command's combined output, its start and end when it
	// was longer than the tools' output cap.
	Output string `json:"output"`
	// Changes are the files the command added, changed, deleted or
	// renamed, by path. A change too large to hold is listed without its
	// content, and TooLarge says so.
	Changes []FileChange `json:"changes,omitempty"`
	// Omitted are the things the command made or deleted that are not
	// files, folders or symbolic links (a named pipe, a socket, a
	// device), each "path (what it is)": shown, never applied.
	Omitted []string `json:"omitted,omitempty"`
	// TooLarge, when set, says why the changes cannot be applied from the
	// run (their size, their number): approving then applies nothing.
	TooLarge string `json:"tooLarge,omitempty"`
	// Preview is the run as the person who decides reads it: how it
	// ended, the start and end of its output, and each change with its
	// diff, bounded like the other previews. The worker writes it, so a
	// replay shows the words the person saw.
	Preview string `json:"preview,omitempty"`
	// Unavailable, when set, says why the command could not run in the
	// sandbox at all (the machine cannot start it): the request asks about
	// the command as it would run unconfined, as without a sandbox.
	Unavailable string `json:"unavailable,omitempty"`
}

// FileChange is one file a sandboxed command added, changed, deleted or
// renamed.
type FileChange struct {
	// Path is the file's path relative to the workspace, with slashes.
	Path string `json:"path"`
	// Op is ChangeAdded, ChangeChanged, ChangeDeleted or ChangeRenamed.
	Op string `json:"op"`
	// From is the path a renamed file had.
	From string `json:"from,omitempty"`
	// Kind is "file", "symlink" or "dir" (an added or deleted empty
	// folder).
	Kind string `json:"kind"`
	// Mode is the file's permission bits after the change.
	Mode uint32 `json:"mode,omitempty"`
	// Before is the SHA-256 (hex) of the file in the workspace when the
	// command ran, of the From file for a rename; empty for an added
	// file or a folder. Of a symbolic link, it is the SHA-256 of
	// "symlink", a NUL byte and its target. Applying refuses a file whose
	// workspace copy no longer has it.
	Before string `json:"before,omitempty"`
	// Content is the file's content after the change (added, changed,
	// renamed); Link the target of a symbolic link.
	Content []byte `json:"content,omitempty"`
	Link    string `json:"link,omitempty"`
	// Binary is true when the file before or after is not text: no diff
	// is shown, only sizes.
	Binary bool `json:"binary,omitempty"`
	// Size is the file's size in bytes after the change.
	Size int64 `json:"size"`
	// Diff shows the lines removed and added in a text file, bounded like
	// the other previews.
	Diff string `json:"diff,omitempty"`
}

// SandboxApplied is what applying a sandboxed run's changes to the
// workspace did.
type SandboxApplied struct {
	// Applied are the paths whose change is now in the workspace.
	Applied []string `json:"applied,omitempty"`
	// Conflicts are the paths refused because the workspace changed under
	// them after the command ran, each with why.
	Conflicts []string `json:"conflicts,omitempty"`
}

// Ran reports whether the command ran in the sandbox: an approve then
// applies what it changed there (nothing when they were TooLarge), never
// the command itself.
func (r *SandboxRun) Ran() bool {
	return r != nil && r.Unavailable == ""
}

// Shown is the run as events carry it: every field but the files'
// contents, which only the apply needs.
func (r SandboxRun) Shown() SandboxRun {
	r.Changes = slices.Clone(r.Changes)
	for i := range r.Changes {
		r.Changes[i].Content = nil
	}
	return r
}
