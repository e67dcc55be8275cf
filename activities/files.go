package activities

import (
	"github.com/tollgate/tollgate/internal/text"

	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"syscall"
)

// Read answers the numbered lines of a file, from line offset on, at most
// limit lines and at most OutputCap bytes.
func (t *Tools) Read(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, ToolRead, in, func(ws *workspace, in ToolInput) (string, error) {
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
		f, err := ws.root.Open(rel)
		if err != nil {
			return "", fileErr("read", *args.FilePath, err)
		}
		defer f.Close()
		info, err := f.Stat()
		if err != nil {
			return "", fileErr("read", *args.FilePath, err)
		}
		if info.IsDir() {
			return "", fmt.Errorf("%q is a directory, not a file", *args.FilePath)
		}
		return readLines(f, *args.FilePath, offset, limit, t.outputCap())
	})
}

// readLines formats lines of r like cat -n. It reads no further than it
// shows, so a huge file (or a huge line) costs no more than the cap.
func readLines(r io.Reader, name string, offset, limit, capBytes int) (string, error) {
	br := bufio.NewReader(r)
	var out strings.Builder
	line, shown := 0, 0
	midLine := false // the previous fragment did not end its line
	for limit < 0 || shown < limit {
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
	return t.run(ctx, ToolWrite, in, func(ws *workspace, in ToolInput) (string, error) {
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
		if _, err := ws.root.Stat(rel); errors.Is(err, fs.ErrNotExist) {
			verb = "Created"
		}
		if dir := filepath.Dir(rel); dir != "." {
			if err := ws.root.MkdirAll(dir, 0o755); err != nil {
				return "", fmt.Errorf("cannot create the folders of %q: %w", *args.FilePath, pathErr(err))
			}
		}
		if err := ws.root.WriteFile(rel, []byte(*args.Content), 0o644); err != nil {
			return "", fileErr("write", *args.FilePath, err)
		}
		return fmt.Sprintf("%s %q (%d bytes)", verb, *args.FilePath, len(*args.Content)), nil
	})
}

// Edit replaces old_string with new_string in a file: exactly one occurrence,
// or every one when replace_all is set.
func (t *Tools) Edit(ctx context.Context, in ToolInput) (ToolOutput, error) {
	return t.run(ctx, ToolEdit, in, func(ws *workspace, in ToolInput) (string, error) {
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
		data, err := ws.root.ReadFile(rel) // a directory is EISDIR: see fileErr
		if err != nil {
			return "", fileErr("read", *args.FilePath, err)
		}
		edited, n, err := applyEdit(*args.FilePath, string(data), *args.OldString, *args.NewString, args.ReplaceAll)
		if err != nil {
			return "", err
		}
		if err := ws.root.WriteFile(rel, []byte(edited), 0o644); err != nil {
			return "", fileErr("write", *args.FilePath, err)
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

// cutUTF8 returns at most n bytes of b, without splitting a character.
