package activities

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// Read answers the numbered lines of a file, from line offset on, at most
// limit lines and at most OutputCap bytes.
func (t *Tools) Read(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, protocol.ToolRead, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			FilePath *string `json:"file_path"`
			Offset   *int    `json:"offset"`
			Limit    *int    `json:"limit"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		if args.FilePath == nil {
			return "", missing("file_path")
		}
		offset, limit := 1, -1
		if args.Offset != nil {
			// 0 is taken as the start: models often count from 0 there.
			if *args.Offset < 0 {
				return "", fmt.Errorf("offset must be 1 or more, not %d", *args.Offset)
			}
			offset = max(*args.Offset, 1)
		}
		if args.Limit != nil {
			if *args.Limit < 1 {
				return "", fmt.Errorf("limit must be 1 or more, not %d", *args.Limit)
			}
			limit = *args.Limit
		}
		rel, err := ws.resolve("file_path", *args.FilePath)
		if err != nil {
			return "", err
		}
		f, _, err := ws.openRegular(rel, *args.FilePath)
		if err != nil {
			return "", err
		}
		defer f.Close()
		return readLines(ctx, f, *args.FilePath, offset, limit, t.outputCap())
	})
}

// readLines formats lines of r like cat -n. It reads no further than it
// shows, so a huge file (or a huge line) costs no more memory than the cap,
// and it stops when ctx ends (lines before offset are read, not kept).
func readLines(ctx context.Context, r io.Reader, name string, offset, limit, capBytes int) (string, error) {
	br := bufio.NewReader(r)
	var out strings.Builder
	line, shown := 0, 0
	midLine := false // the previous fragment did not end its line
	for n := 0; limit < 0 || shown < limit; n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return "", ctx.Err()
		}
		frag, more, err := br.ReadLine()
		if err == io.EOF {
			break
		}
		if err != nil {
			return "", fileErr("read", name, err)
		}
		starts := !midLine
		if starts {
			line++
		}
		midLine = more
		if line < offset {
			continue
		}
		var piece []byte
		if starts {
			piece = fmt.Appendf(nil, "%6d\t", line)
		}
		piece = append(piece, frag...)
		if !more {
			piece = append(piece, '\n')
			shown++
		}
		if out.Len()+len(piece) > capBytes {
			out.WriteString(text.Cut(string(piece), capBytes-out.Len()))
			fmt.Fprintf(&out, "\n... [output truncated at %d bytes in line %d: read on with offset %d]", capBytes, line, line)
			return out.String(), nil
		}
		out.Write(piece)
	}
	switch {
	case line == 0:
		return "(the file is empty)", nil
	case line < offset:
		return "", fmt.Errorf("offset %d is past the end of %q, which has %d lines", offset, name, line)
	}
	return out.String(), nil
}

// Write replaces or creates a file with the given content, creating missing
// parent folders inside the workspace.
func (t *Tools) Write(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, protocol.ToolWrite, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			FilePath *string `json:"file_path"`
			Content  *string `json:"content"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		if args.FilePath == nil {
			return "", missing("file_path")
		}
		if args.Content == nil {
			return "", missing("content")
		}
		rel, err := ws.resolve("file_path", *args.FilePath)
		if err != nil {
			return "", err
		}
		verb := "Updated"
		if _, err := ws.root.Lstat(rel); errors.Is(err, fs.ErrNotExist) {
			verb = "Created"
		}
		if dir := filepath.Dir(rel); dir != "." {
			if err := ws.root.MkdirAll(dir, 0o755); err != nil {
				return "", fmt.Errorf("cannot create the folders of %q: %w", *args.FilePath, pathErr(err))
			}
		}
		if err := ws.writeRegular(rel, *args.FilePath, []byte(*args.Content)); err != nil {
			return "", err
		}
		return fmt.Sprintf("%s %q (%d bytes)", verb, *args.FilePath, len(*args.Content)), nil
	})
}

// Edit replaces old_string with new_string in a file: exactly one occurrence,
// or every one when replace_all is set.
func (t *Tools) Edit(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, protocol.ToolEdit, in, func(ws *workspace, in ToolInput) (string, error) {
		var args struct {
			FilePath   *string `json:"file_path"`
			OldString  *string `json:"old_string"`
			NewString  *string `json:"new_string"`
			ReplaceAll bool    `json:"replace_all"`
		}
		if err := decodeArgs(in.Call.Arguments, &args); err != nil {
			return "", err
		}
		switch {
		case args.FilePath == nil:
			return "", missing("file_path")
		case args.OldString == nil:
			return "", missing("old_string")
		case args.NewString == nil:
			return "", missing("new_string")
		}
		rel, err := ws.resolve("file_path", *args.FilePath)
		if err != nil {
			return "", err
		}
		data, err := ws.readRegular(rel, *args.FilePath)
		if err != nil {
			return "", err
		}
		edited, n, err := applyEdit(*args.FilePath, string(data), *args.OldString, *args.NewString, args.ReplaceAll)
		if err != nil {
			return "", err
		}
		if err := ws.writeRegular(rel, *args.FilePath, []byte(edited)); err != nil {
			return "", err
		}
		return fmt.Sprintf("Edited %q: replaced %d %s", *args.FilePath, n, text.Plural(n, "occurrence")), nil
	})
}

// applyEdit is what Edit does to text, the content of the file at path, and
// what its preview shows: it replaces old with new, in the one place old
// occurs, or in every one with all, and says how many. Its errors are
// written for the model to correct its call.
func applyEdit(path, text, old, new string, all bool) (string, int, error) {
	switch {
	case old == "":
		return "", 0, errors.New("old_string is empty; use Write to create or replace a whole file")
	case old == new:
		return "", 0, errors.New("old_string and new_string are the same; there is nothing to change")
	}
	switch n := strings.Count(text, old); {
	case n == 0:
		return "", 0, fmt.Errorf("old_string was not found in %q", path)
	case n > 1 && !all:
		return "", 0, fmt.Errorf("old_string occurs %d times in %q; include more surrounding text to make it unique, or set replace_all", n, path)
	default:
		return strings.ReplaceAll(text, old, new), n, nil
	}
}

// fileErr says why a file could not be read or written, naming it as the
// model did.
func fileErr(verb, name string, err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%q does not exist", name)
	case errors.Is(err, syscall.EISDIR):
		return fmt.Errorf("%q is a directory, not a file", name)
	default:
		return fmt.Errorf("cannot %s %q: %w", verb, name, pathErr(err))
	}
}

// maxFileBytes is the most a tool or a preview reads of a file whole: the
// file Edit changes, and the file a Write replaces, for its preview's diff.
// Read streams any file, and keeps no more than its output cap.
const maxFileBytes = 16 << 20

// errTooLarge is the error of a file past maxFileBytes.
type errTooLarge struct {
	name string
	size int64
}

func (e errTooLarge) Error() string {
	return fmt.Sprintf("%q has %d bytes, more than the %d MiB a tool reads whole; use Bash for it", e.name, e.size, maxFileBytes>>20)
}

// openRegular opens rel, which names name, for reading, if it is a
// regular file, without ever waiting on a special file: it looks first
// (lstat), then opens with O_NONBLOCK, so that a FIFO put there since
// opens at once rather than waiting for a writer, and checks again what it
// opened (fstat), which it gives with the file. A FIFO, a device or a
// socket is refused, naming it.
func (w *workspace) openRegular(rel, name string) (*os.File, fs.FileInfo, error) {
	if info, err := w.root.Lstat(rel); err != nil {
		return nil, nil, fileErr("read", name, err)
	} else if !info.Mode().IsRegular() {
		return nil, nil, notRegular(name, info.Mode())
	}
	f, err := w.root.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, nil, fileErr("read", name, err)
	}
	info, err := f.Stat()
	switch {
	case err != nil:
		f.Close()
		return nil, nil, fileErr("read", name, err)
	case !info.Mode().IsRegular():
		f.Close()
		return nil, nil, notRegular(name, info.Mode())
	}
	return f, info, nil
}

// readRegular reads the whole of rel, which names name, if it is a regular
// file of at most maxFileBytes (openRegular).
func (w *workspace) readRegular(rel, name string) ([]byte, error) {
	f, info, err := w.openRegular(rel, name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if info.Size() > maxFileBytes {
		return nil, errTooLarge{name, info.Size()}
	}
	// Read no more than the limit, even of a file that grows meanwhile.
	data, err := io.ReadAll(io.LimitReader(f, maxFileBytes+1))
	if err != nil {
		return nil, fileErr("read", name, err)
	}
	if len(data) > maxFileBytes {
		return nil, errTooLarge{name, int64(len(data))}
	}
	return data, nil
}

// writeRegular replaces the content of rel, which names name, with data,
// creating it when it does not exist, keeping its mode when it does. It
// writes only a regular file, and never waits on a special file: a FIFO
// that no one reads fails to open with O_NONBLOCK, and what it opened is
// checked (fstat) before it is truncated or a byte is written. A file of
// more than one hard link is refused: writing it would change the file
// under its other names too, which the policy and the person did not see
// (docs/readme.md hard-linked to README.md is README.md).
func (w *workspace) writeRegular(rel, name string, data []byte) error {
	if info, err := w.root.Lstat(rel); err == nil && !info.Mode().IsRegular() {
		return notRegular(name, info.Mode())
	}
	f, err := w.root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|syscall.O_NONBLOCK, 0o644)
	if errors.Is(err, syscall.ENXIO) {
		return notRegular(name, fs.ModeNamedPipe)
	}
	if err != nil {
		return fileErr("write", name, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return fileErr("write", name, err)
	}
	if !info.Mode().IsRegular() {
		return notRegular(name, info.Mode())
	}
	if err := oneName(name, info); err != nil {
		return err
	}
	if err := f.Truncate(0); err != nil {
		return fileErr("write", name, err)
	}
	if _, err := f.Write(data); err != nil {
		return fileErr("write", name, err)
	}
	if err := f.Close(); err != nil {
		return fileErr("write", name, err)
	}
	return nil
}

// oneName refuses a file of more than one hard link, which a write would
// change under its other names too.
func oneName(name string, info fs.FileInfo) error {
	if st, ok := info.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
		return fmt.Errorf("%q has %d hard links: writing it would change the same file under its other names, which this call does not show; use Bash for it", name, st.Nlink)
	}
	return nil
}

// notRegular says that name, of the given mode, is not a file a tool reads
// or writes.
func notRegular(name string, mode fs.FileMode) error {
	var kind string
	switch {
	case mode.IsDir():
		return fmt.Errorf("%q is a directory, not a file", name)
	case mode&fs.ModeNamedPipe != 0:
		kind = "a named pipe (FIFO)"
	case mode&fs.ModeSocket != 0:
		kind = "a socket"
	case mode&fs.ModeCharDevice != 0:
		kind = "a character device"
	case mode&fs.ModeDevice != 0:
		kind = "a block device"
	case mode&fs.ModeSymlink != 0:
		kind = "a symbolic link"
	default:
		kind = "a special file"
	}
	return fmt.Errorf("%q is %s, not a regular file: file tools read and write regular files only", name, kind)
}
