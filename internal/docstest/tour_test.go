package docstest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tollgate/tollgate/internal/devserver"
	"github.com/tollgate/tollgate/protocol"
)

// tourHeading is the README's section a new user follows first.
const tourHeading = "## Five minutes with curl"

// readmeAPI is the API's address as the README writes it; the test's
// stack listens elsewhere.
const readmeAPI = "http://127.0.0.1:8080"

// tourCommand is one command of the tour's shell blocks, with the answer
// the README shows for it (the comment lines after it, or on its line),
// and the stream it shows (the plain block after it), if any.
type tourCommand struct {
	line   string
	answer []string
	stream []string
}

// tourCommands reads the tour's commands, in order: each ```sh block's
// commands (a line ending in \ goes on), the comments that show their
// answers, and the plain ``` block that shows a stream.
func tourCommands(t *testing.T, readme string) []*tourCommand {
	t.Helper()
	_, section, ok := strings.Cut(readme, "\n"+tourHeading+"\n")
	require.True(t, ok, "README.md has no heading %q", tourHeading)
	section, _, _ = strings.Cut(section, "\n## ")
	var cmds []*tourCommand
	lines := strings.Split(section, "\n")
	for i := 0; i < len(lines); i++ {
		lang, fenced := strings.CutPrefix(lines[i], "```")
		if !fenced {
			continue
		}
		var block []string
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			block = append(block, lines[i])
		}
		switch lang {
		case "":
			require.NotEmpty(t, cmds, "a stream shown before any command")
			cmds[len(cmds)-1].stream = block
		case "sh":
			cmds = append(cmds, shellCommands(block)...)
		}
	}
	return cmds
}

// shellCommands splits a shell block into its commands. A comment after a
// command shows its answer, line by line, unless it starts with a small
// letter (a remark, such as "or ?after=8"); one indented further goes on
// from the line before.
func shellCommands(block []string) []*tourCommand {
	var cmds []*tourCommand
	var cur *tourCommand
	more := false
	for _, l := range block {
		if c, ok := strings.CutPrefix(l, "# "); ok {
			switch {
			case cur == nil:
			case strings.HasPrefix(c, "  ") && len(cur.answer) > 0:
				cur.answer[len(cur.answer)-1] += strings.TrimSpace(c)
			case isAnswer(c):
				cur.answer = append(cur.answer, c)
			}
			continue
		}
		if strings.TrimSpace(l) == "" {
			continue
		}
		if more {
			cur.line += " " + strings.TrimSpace(strings.TrimSuffix(l, "\\"))
		} else {
			cmd, comment, _ := strings.Cut(l, "   # ")
			cur = &tourCommand{line: strings.TrimSpace(strings.TrimSuffix(cmd, "\\"))}
			if isAnswer(comment) {
				cur.answer = append(cur.answer, comment)
			}
			cmds = append(cmds, cur)
		}
		more = strings.HasSuffix(l, "\\")
	}
	return cmds
}

func isAnswer(comment string) bool {
	return comment != "" && !('a' <= comment[0] && comment[0] <= 'z')
}

var (
	// elision is what the README writes for what varies: an id's example
	// start (hex digits) and …, or … alone.
	elision = regexp.MustCompile(`[0-9a-f]*…`)
	// duration is a time as the terminal client prints it: 5s, 29m55s.
	duration = regexp.MustCompile(`\b(?:\d+[dhms])+\b`)
	spaces   = regexp.MustCompile(`\s+`)
)

// shown turns a line the README shows into a pattern: … and an id's
// example start before it match anything, a duration any duration, and
// spaces any spaces.
func shown(line string) *regexp.Regexp {
	var b strings.Builder
	b.WriteString("^")
	for _, part := range spaces.Split(strings.TrimSpace(line), -1) {
		if b.Len() > 1 {
			b.WriteString(`\s+`)
		}
		rest := part
		for rest != "" {
			loc := elision.FindStringIndex(rest)
			dur := duration.FindStringIndex(rest)
			if dur != nil && (loc == nil || dur[0] < loc[0]) {
				b.WriteString(regexp.QuoteMeta(rest[:dur[0]]) + `(?:\d+[dhms])+`)
				rest = rest[dur[1]:]
				continue
			}
			if loc == nil {
				b.WriteString(regexp.QuoteMeta(rest))
				break
			}
			b.WriteString(regexp.QuoteMeta(rest[:loc[0]]) + `.*?`)
			rest = rest[loc[1]:]
		}
	}
	b.WriteString("$")
	return regexp.MustCompile(b.String())
}

// matchesAnswer reports whether out has the lines answer shows, in any
// order (a table's rows of equal expiry come in either).
func matchesAnswer(answer []string, out string) bool {
	var got []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.TrimSpace(l) != "" {
			got = append(got, l)
		}
	}
	if len(got) != len(answer) {
		return false
	}
	for _, want := range answer {
		re := shown(want)
		i := slices.IndexFunc(got, func(l string) bool { return re.MatchString(strings.TrimSpace(l)) })
		if i < 0 {
			return false
		}
		got = slices.Delete(got, i, i+1)
	}
	return true
}

// tourShell runs the README's commands as a user would, in a folder whose
// bin/ and .tollgate/ are the stack's, with the stack's addresses.
type tourShell struct {
	stack *devStack
	dir   string
	// ids are what the user copies from the streams: <Write requestId> and
	// the like.
	ids map[string]string
}

func newTourShell(t *testing.T, stack *devStack, temporalCLI string) *tourShell {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, os.Symlink(stack.bin, filepath.Join(dir, "bin")))
	require.NoError(t, os.Symlink(stack.state, filepath.Join(dir, ".tollgate")))
	require.NoError(t, os.Symlink(temporalCLI, filepath.Join(stack.bin, "temporal")))
	return &tourShell{stack: stack, dir: dir, ids: map[string]string{}}
}

// expand puts the stack's address and the copied ids into s.
func (sh *tourShell) expand(t *testing.T, s string) string {
	t.Helper()
	s = strings.ReplaceAll(s, readmeAPI, sh.stack.api)
	for _, m := range regexp.MustCompile(`<[^<>]+>`).FindAllString(s, -1) {
		id, ok := sh.ids[m]
		require.True(t, ok, "the README asks for %s, which the tour has not shown yet", m)
		s = strings.ReplaceAll(s, m, id)
	}
	return s
}

// command makes the shell command for line.
func (sh *tourShell) command(ctx context.Context, t *testing.T, line string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, "bash", "-c", sh.expand(t, line))
	cmd.Dir = sh.dir
	cmd.Env = append(os.Environ(), "TEMPORAL_ADDRESS="+sh.stack.temporalAddr, "TEMPORAL_NAMESPACE=default", "TOLLGATE_API="+sh.stack.api)
	return cmd
}

// run runs a command to its end and returns what it printed: its output,
// its errors, and both.
func (sh *tourShell) run(t *testing.T, line string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := sh.command(ctx, t, line)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run() // a refusal may exit non-zero; its answer is what counts
	require.NoError(t, ctx.Err(), "%s did not end within a minute", line)
	return []string{stdout.String(), stderr.String(), stdout.String() + "\n" + stderr.String()}
}

// stream starts a streaming command and returns its numbered events'
// data as they come; the channel closes when the stream ends.
func (sh *tourShell) stream(t *testing.T, line string) <-chan string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := sh.command(ctx, t, line)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	events := make(chan string, 1024)
	go func() {
		defer close(events)
		_ = protocol.ReadSSE(bufio.NewReader(out), func(m protocol.SSEMessage) error {
			if m.ID != "" {
				events <- m.Data
			}
			return nil
		})
	}()
	return events
}

// until reads events until one of type typ and returns them all.
func until(t *testing.T, events <-chan string, typ string) []string {
	t.Helper()
	var got []string
	deadline := time.After(time.Minute)
	for {
		select {
		case d, ok := <-events:
			require.True(t, ok, "the stream ended before %s; it had %s", typ, got)
			got = append(got, d)
			if eventType(t, d) == typ {
				return got
			}
		case <-deadline:
			t.Fatalf("no %s within a minute; the stream had %s", typ, got)
		}
	}
}

func eventType(t *testing.T, data string) string {
	t.Helper()
	return decode(t, data).Type
}

func decode(t *testing.T, data string) protocol.Event {
	t.Helper()
	var e protocol.Event
	require.NoError(t, json.Unmarshal([]byte(data), &e), data)
	return e
}

// seqField is an event's number, which the pieces of an answer move.
var seqField = regexp.MustCompile(`^\{"seq":\d+,`)

// requireStreamAsShown compares a stream's events with the ones the README
// shows (its id: and data: lines): the same events in the same order, each
// as shown but for what the README elides, with the answer's token events
// taken together (their pieces vary).
func requireStreamAsShown(t *testing.T, shownLines, got []string) {
	t.Helper()
	var want []string
	for _, l := range shownLines {
		if d, ok := strings.CutPrefix(l, "data: "); ok {
			want = append(want, d)
		}
	}
	wantText, gotText := "", ""
	var wantRest, gotRest []string
	for _, d := range want {
		if strings.Contains(d, `"type":"token"`) {
			m := regexp.MustCompile(`"data":("(?:[^"\\]|\\.)*")`).FindStringSubmatch(d)
			require.NotNil(t, m, "a token the README shows without its data: %s", d)
			var piece string
			require.NoError(t, json.Unmarshal([]byte(m[1]), &piece))
			wantText += piece
			continue
		}
		wantRest = append(wantRest, seqField.ReplaceAllString(d, "{"))
	}
	for _, d := range got {
		if e := decode(t, d); e.Type == protocol.EventToken {
			gotText += e.Data
			continue
		}
		gotRest = append(gotRest, seqField.ReplaceAllString(d, "{"))
	}
	require.Equal(t, wantText, gotText, "the answer's text the README shows")
	require.Len(t, gotRest, len(wantRest), "the README shows events %s; the stream had %s", wantRest, gotRest)
	for i := range wantRest {
		require.Regexp(t, shown(wantRest[i]), gotRest[i], "event %d of the README's stream", i+1)
	}
}

// TestTheREADMETourAnswersWhatTheREADMEShows follows the README's five
// minutes with curl on make dev's own stack (scripts/dev.sh: the dev
// server, the scripted model, SQLite, the local payload store): it runs
// each command the tour shows, with the ids a user would copy, and
// compares every answer and stream the README shows with what came.
func TestTheREADMETourAnswersWhatTheREADMEShows(t *testing.T) {
	if testing.Short() {
		t.Skip("runs make dev's stack")
	}
	temporalCLI, err := devserver.Binary()
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	cmds := tourCommands(t, string(readme))

	stack := startDevStack(t, temporalCLI, false) // a new user's make dev builds tollgate
	sh := newTourShell(t, stack, temporalCLI)
	var streams []<-chan string
	// rest is the first stream after its heartbeat; a reader who sends a
	// decision again has read it to its finish first.
	var rest []string
	decided := map[string]bool{}
	for _, c := range cmds {
		if id := decisionOf(sh.expand(t, c.line)); id != "" {
			if decided[id] && rest == nil {
				rest = until(t, streams[0], protocol.EventFinish)
			}
			decided[id] = true
		}
		switch {
		case strings.HasPrefix(c.line, "make "):
			continue // the stack runs already
		case strings.HasPrefix(c.line, "curl -N") && strings.Contains(c.line, "/chat/stream"):
			events := sh.stream(t, c.line)
			first := until(t, events, protocol.EventHeartbeat)
			if c.stream != nil {
				requireStreamAsShown(t, c.stream, first)
			}
			sh.copyIDs(t, first)
			streams = append(streams, events)
			continue
		}
		outs := sh.run(t, c.line)
		if len(c.answer) == 0 {
			continue
		}
		for i := range c.answer {
			c.answer[i] = strings.ReplaceAll(c.answer[i], readmeAPI, stack.api)
		}
		// Every answer is checked, so one run names every difference.
		assert.True(t, slices.ContainsFunc(outs, func(out string) bool { return matchesAnswer(c.answer, out) }),
			"README's %s\nshows:\n%s\nbut it answered:\n%s\n(errors: %s)", c.line, strings.Join(c.answer, "\n"), outs[0], outs[1])
	}
	require.NotEmpty(t, streams, "the tour starts a turn")
	// What the README says of the first stream after the decisions.
	if rest == nil {
		rest = until(t, streams[0], protocol.EventFinish)
	}
	var types []string
	for _, d := range rest {
		if typ := eventType(t, d); len(types) == 0 || typ != protocol.EventToken || types[len(types)-1] != typ {
			types = append(types, typ)
		}
	}
	require.Equal(t, []string{protocol.EventApprovalDecision, protocol.EventApprovalDecision, protocol.EventToolResult,
		protocol.EventToken, protocol.EventFinish}, types, "two decisions, one tool_result, the answer's tokens, finish")
	_, goesOn, ok := strings.Cut(string(readme), "The first stream goes on:")
	require.True(t, ok, "the README says how the first stream goes on")
	goesOn, _, _ = strings.Cut(goesOn, "\n\n")
	var named []string
	for _, span := range CodeSpans(goesOn) {
		if span == strings.ToLower(span) { // event types; the tools' names are capitalized
			named = append(named, span)
		}
	}
	require.ElementsMatch(t, slices.Compact(slices.Sorted(slices.Values(types))), named,
		"the README names the events the first stream goes on with, and no other")

	require.Equal(t, 0, stack.dev.interrupt(t), "Ctrl-C stops make dev cleanly:\n%s", stack.dev.output())
	require.Contains(t, stack.dev.output(), "dev: stopped")
}

// decisionOf returns the request id a command decides, or "".
func decisionOf(line string) string {
	if !strings.Contains(line, "/chat/approval") {
		return ""
	}
	m := regexp.MustCompile(`"requestId":"([^"]+)"`).FindStringSubmatch(line)
	if m == nil {
		return ""
	}
	return m[1]
}

// copyIDs keeps the ids a user copies from a stream's first events: the
// conversation's, the turn's, and its approval requests' by tool. The
// first turn's requests are <Write requestId> and <Bash requestId>; every
// turn's first request is <requestId>, its second <other requestId>.
func (sh *tourShell) copyIDs(t *testing.T, events []string) {
	t.Helper()
	var requests []protocol.Event
	for _, d := range events {
		e := decode(t, d)
		switch e.Type {
		case protocol.EventTurnStart:
			sh.ids["<conversationId>"], sh.ids["<turnId>"], sh.ids["<workflowId>"] = e.ConversationID, e.TurnID, e.WorkflowID
		case protocol.EventApprovalRequest:
			requests = append(requests, e)
		}
	}
	require.Len(t, requests, 2, "the demo model's batch asks twice")
	for _, r := range requests {
		if _, ok := sh.ids["<"+r.ToolName+" requestId>"]; !ok {
			sh.ids["<"+r.ToolName+" requestId>"] = r.RequestID
		}
	}
	sh.ids["<requestId>"], sh.ids["<other requestId>"] = requests[0].RequestID, requests[1].RequestID
}
