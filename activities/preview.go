package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"strings"
	"sync"

	"github.com/tollgate/tollgate/internal/text"
	"github.com/tollgate/tollgate/protocol"
)

// PreviewActivity is the name of the activity that shows what a call will
// do before a person is asked about it.
const PreviewActivity = "Preview"

// PreviewsActivity is the name of the activity that shows what each call
// of a batch will do (Previews): one local activity, and so one marker in
// the turn's history, for the whole batch.
const PreviewsActivity = "Previews"

// Previews is Preview of every call of ins, made at once, in their order:
// a preview that cannot be made says why in its place ("(no preview:
// ...)"), and never fails the others.
func (t *Tools) Previews(ctx context.Context, ins []ToolInput) ([]string, error) {
	out := make([]string, len(ins))
	var wg sync.WaitGroup
	for i, in := range ins {
		wg.Go(func() {
			p, err := t.Preview(ctx, in)
			if err != nil {
				p = "(no preview: " + err.Error() + ")"
			}
			out[i] = p
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// previewLines bounds the lines a preview shows; the rest is counted.
const previewLines = 200

// Preview says what call will do, read where the files are, for the person
// who decides: for Write the file it replaces (or that it is new) and the
// lines removed and added; for Edit the lines it changes, or that it would
// fail; for Bash the command exactly as it will run, line by line; at most
// OutputCap bytes. It reads
// and never writes. A preview that cannot be made says why, and never
// fails the activity: it must not hold up the decision.
func (t *Tools) Preview(ctx context.Context, in ToolInput) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	switch in.Call.Name {
	case protocol.ToolWrite, protocol.ToolEdit, protocol.ToolBash:
	default:
		return "", nil
	}
	out, err := t.run(ctx, in.Call.Name, in, func(ws *workspace, in ToolInput) (string, error) {
		switch in.Call.Name {
		case protocol.ToolWrite:
			return previewWrite(ws, in.Call.Arguments)
		case protocol.ToolEdit:
			return previewEdit(ws, in.Call.Arguments)
		default:
			return previewBash(in.Call.Arguments)
		}
	})
	if err != nil {
		return "", err
	}
	if out.Status != protocol.StatusOK {
		return "(no preview: " + out.Result + ")", nil
	}
	// A preview goes into the approval request, in history: no larger than
	// a tool's output, however long the file's lines.
	return text.Truncate(out.Result, t.outputCap()), nil
}

func previewWrite(ws *workspace, arguments string) (string, error) {
	var args struct {
		FilePath string `json:"file_path"`
		Content  string `json:"content"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", err
	}
	rel, err := ws.resolve("file_path", args.FilePath)
	if err != nil {
		return "", err
	}
	info, err := ws.root.Lstat(rel)
	if errors.Is(err, fs.ErrNotExist) {
		lines := splitLines(args.Content)
		return fmt.Sprintf("new file %s: +%d lines (%d bytes)\n%s", args.FilePath, len(lines), len(args.Content), diffLines(nil, lines)), nil
	}
	if err == nil {
		if err := oneName(args.FilePath, info); err != nil {
			return fmt.Sprintf("write %s would fail: %s", args.FilePath, err), nil
		}
	}
	old, err := ws.readRegular(rel, args.FilePath)
	var large errTooLarge
	switch {
	case errors.As(err, &large):
		return fmt.Sprintf("overwrite %s (%d bytes, too large to compare) with %d lines (%d bytes)",
			args.FilePath, large.size, len(splitLines(args.Content)), len(args.Content)), nil
	case err != nil:
		return "", err
	}
	before, after := splitLines(string(old)), splitLines(args.Content)
	removed, added := changed(before, after)
	return fmt.Sprintf("overwrite %s (%d lines, %d bytes) with %d lines (%d bytes): −%d +%d\n%s",
		args.FilePath, len(before), len(old), len(after), len(args.Content), removed, added, diffLines(before, after)), nil
}

func previewEdit(ws *workspace, arguments string) (string, error) {
	var args struct {
		FilePath   string `json:"file_path"`
		OldString  string `json:"old_string"`
		NewString  string `json:"new_string"`
		ReplaceAll bool   `json:"replace_all"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", err
	}
	rel, err := ws.resolve("file_path", args.FilePath)
	if err != nil {
		return "", err
	}
	data, err := ws.readRegular(rel, args.FilePath)
	if err != nil {
		return "", err
	}
	if info, err := ws.root.Lstat(rel); err == nil {
		if err := oneName(args.FilePath, info); err != nil {
			return fmt.Sprintf("edit %s would fail: %s", args.FilePath, err), nil
		}
	}
	updated, n, err := applyEdit(args.FilePath, string(data), args.OldString, args.NewString, args.ReplaceAll)
	if err != nil {
		return fmt.Sprintf("edit %s would fail: %s", args.FilePath, err), nil
	}
	before, after := splitLines(string(data)), splitLines(updated)
	removed, added := changed(before, after)
	return fmt.Sprintf("edit %s (%d %s): −%d +%d\n%s", args.FilePath, n, text.Plural(n, "place"), removed, added, diffLines(before, after)), nil
}

func previewBash(arguments string) (string, error) {
	var args struct {
		Command string `json:"command"`
	}
	if err := json.Unmarshal([]byte(arguments), &args); err != nil {
		return "", err
	}
	lines := strings.Split(args.Command, "\n")
	var b strings.Builder
	fmt.Fprintf(&b, "runs in the workspace with bash -c (%d %s, %d bytes):\n", len(lines), text.Plural(len(lines), "line"), len(args.Command))
	for _, l := range lines {
		// Every line as it is: whitespace and all, marked where it ends.
		fmt.Fprintf(&b, "$ %s⏎\n", l)
	}
	return b.String(), nil
}

// splitLines cuts text into its lines, without their newlines.
func splitLines(text string) []string {
	if text == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(text, "\n"), "\n")
}

// changed counts the lines removed and added between before and after,
// outside their common beginning and end.
func changed(before, after []string) (removed, added int) {
	p, s := commonEnds(before, after)
	return len(before) - p - s, len(after) - p - s
}

// commonEnds is how many lines before and after share at the beginning and
// at the end.
func commonEnds(before, after []string) (prefix, suffix int) {
	for prefix < len(before) && prefix < len(after) && before[prefix] == after[prefix] {
		prefix++
	}
	for suffix < len(before)-prefix && suffix < len(after)-prefix && before[len(before)-1-suffix] == after[len(after)-1-suffix] {
		suffix++
	}
	return prefix, suffix
}

// diffLines shows the lines that change between before and after, as a
// unified diff's body (a line of context around them, "-" removed, "+"
// added), at most previewLines of it.
func diffLines(before, after []string) string {
	p, s := commonEnds(before, after)
	var lines []string
	if p > 0 {
		lines = append(lines, fmt.Sprintf("@@ line %d @@", p), "  "+before[p-1])
	}
	for _, l := range before[p : len(before)-s] {
		lines = append(lines, "- "+l)
	}
	for _, l := range after[p : len(after)-s] {
		lines = append(lines, "+ "+l)
	}
	if s > 0 {
		lines = append(lines, "  "+before[len(before)-s])
	}
	if len(lines) > previewLines {
		more := len(lines) - previewLines
		lines = append(lines[:previewLines], fmt.Sprintf("… %d more %s", more, text.Plural(more, "line")))
	}
	return strings.Join(lines, "\n")
}
