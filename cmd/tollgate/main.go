// Command tollgate is tollgate's terminal client: it chats with an agent
// and decides its approvals from a terminal, over the HTTP API.
//
//	tollgate chat "tidy up the workspace" [--conversation ID] [--bypass]
//	tollgate approvals [--decide] [--conversation ID] [--tool NAME]
//	tollgate compact --conversation ID ["INSTRUCTIONS"]
//	tollgate policy suggest [--since 30d] [--min 10] [--tool NAME]
//	tollgate policy test FILE [--since 7d] [--conversation ID]
//	tollgate policy check FILE
//	tollgate freeze [--block-new-turns] [--reason TEXT]
//	tollgate thaw [--reason TEXT]
//	tollgate audit verify [--file EXPORT] [--expect-head HASH]
//
// Every command takes --api URL (default $TOLLGATE_API, else
// http://127.0.0.1:8080) and --token TOKEN (default $TOLLGATE_API_TOKEN), the
// bearer token of an API that asks for one.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/tollgate/tollgate/internal/suggest"
	"github.com/tollgate/tollgate/protocol"
)

// EnvAPI names the variable that holds the API's URL.
const EnvAPI = "TOLLGATE_API"

// EnvToken names the variable that holds the API's bearer token.
const EnvToken = "TOLLGATE_API_TOKEN"

// defaultAPI is the API's address when neither --api nor TOLLGATE_API say.
const defaultAPI = "http://127.0.0.1:8080"

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // the turn did not finish with stop, a request failed, a policy test found a problem, or the ledger does not verify
	exitUsage = 2
)

const usage = `tollgate: chat with an agent and decide its approvals from a terminal.

Usage:
  tollgate chat "MESSAGE" [--conversation ID] [--bypass] [--api URL] [--token TOKEN]
      Send MESSAGE (in a new conversation unless --conversation names one),
      print the turn as it streams and ask about each approval:
        approve? [y/N/e=edit/r=reason]
      y approves, N or Enter declines, e approves with edited arguments
      (one line of JSON), r declines with a reason. --bypass runs protected
      tools without asking. Exits 0 when the turn finishes with stop.

  tollgate approvals [--decide] [--conversation ID] [--tool NAME] [--api URL] [--token TOKEN]
      List the approvals waiting across all conversations; with --decide,
      ask about each in turn.

  tollgate compact --conversation ID ["INSTRUCTIONS"] [--api URL] [--token TOKEN]
      Summarize the conversation's earlier messages now, keeping what
      INSTRUCTIONS say ("keep the decisions about the schema"); its next
      turn reads the summary in their place. The transcript keeps them all.

  tollgate policy suggest [--since 30d] [--min 10] [--tool NAME] [--api URL] [--token TOKEN]
      Read the audit ledger (GET /audit) and propose the rules or grants
      that would have answered calls people approved --min times or more
      and never declined or edited: a command, its first two words, a
      file, a folder. Prints each with its count, the last similar call a
      person declined, and its YAML; applies nothing.

  tollgate policy test FILE [--since 7d] [--conversation ID] [--api URL] [--token TOKEN]
      Backtest the policy file FILE on the audit ledger (a token with the
      admin role): for each call that asked (since 7d, 36h or an RFC 3339
      time), what FILE would do, by rule and tool, the calls a person
      DECLINED that it would let run without one first. Exits 1 when there
      is one, or an example of FILE fails.

  tollgate policy check FILE [--api URL] [--token TOKEN]
      Check the examples of FILE's rules, as a worker does when it starts.
      Exits 1 when one fails.

  tollgate freeze [--block-new-turns] [--reason TEXT] [--api URL] [--token TOKEN]
      Freeze the gate (a token with the admin role): every call a rule
      protects asks a person (no grant, sandbox: auto or bypass answers
      it); with --block-new-turns no new message starts a turn.

  tollgate thaw [--reason TEXT] [--api URL] [--token TOKEN]
      Thaw the gate.

  tollgate audit verify [--file EXPORT] [--expect-head HASH] [--api URL] [--token TOKEN]
      Check that the audit ledger holds together (GET /audit/verify, a
      token with the admin role): its chain of hashes, and every row
      against it. With --file, check an export of it instead, without the
      API (GET /audit?format=jsonl&chain=1; - reads the standard input).
      Prints the head hash to keep elsewhere; --expect-head HASH checks
      that the chain still holds one kept earlier. Exits 1 when it does
      not hold together, naming the first bad entry or row.

The API is at --api, else $TOLLGATE_API, else ` + defaultAPI + `.
An API that asks for a bearer token gets --token, else $TOLLGATE_API_TOKEN.
`

func main() {
	// What is printed comes from elsewhere too: control characters are shown,
	// not obeyed (terminal).
	os.Exit(run(context.Background(), os.Args[1:], os.Getenv, os.Stdin, &terminal{w: os.Stdout}, &terminal{w: os.Stderr}))
}

// run runs the command in args and returns the exit code. Answers to
// approval prompts are read from in.
func run(ctx context.Context, args []string, getenv func(string) string, in io.Reader, out, errOut io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(errOut, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	fs := flag.NewFlagSet("tollgate "+cmd, flag.ContinueOnError)
	fs.SetOutput(errOut)
	fs.Usage = func() { fmt.Fprint(errOut, usage) }
	api := fs.String("api", cmp.Or(getenv(EnvAPI), defaultAPI), "tollgate API `URL`")
	conv := fs.String("conversation", "", "conversation `ID`")
	token := fs.String("token", getenv(EnvToken), "the API's bearer `TOKEN`")
	newClient := func() *apiClient {
		c := newAPIClient(*api)
		c.token = strings.TrimSpace(*token)
		return c
	}

	switch cmd {
	case "chat":
		bypass := fs.Bool("bypass", false, "run protected tools without asking")
		words, err := parseInterspersed(fs, rest)
		if err != nil {
			return exitUsage
		}
		query := strings.TrimSpace(strings.Join(words, " "))
		if query == "" {
			fmt.Fprint(errOut, "tollgate chat: no message\n\n"+usage)
			return exitUsage
		}
		reason, err := chat(ctx, newClient(), chatOptions{Query: query, ConversationID: *conv, Bypass: *bypass}, in, out)
		if err != nil {
			fmt.Fprintf(errOut, "tollgate chat: %v\n", err)
			return exitFail
		}
		if reason != protocol.FinishStop {
			return exitFail
		}
		return exitOK
	case "approvals":
		decide := fs.Bool("decide", false, "ask about each pending approval")
		tool := fs.String("tool", "", "only approvals of tool `NAME`")
		words, err := parseInterspersed(fs, rest)
		if err != nil {
			return exitUsage
		}
		if len(words) > 0 {
			fmt.Fprintf(errOut, "tollgate approvals: unexpected %q\n\n%s", words, usage)
			return exitUsage
		}
		opts := approvalsOptions{ConversationID: *conv, Tool: *tool, Decide: *decide}
		if err := approvals(ctx, newClient(), opts, in, out); err != nil {
			fmt.Fprintf(errOut, "tollgate approvals: %v\n", err)
			return exitFail
		}
		return exitOK
	case "compact":
		words, err := parseInterspersed(fs, rest)
		if err != nil {
			return exitUsage
		}
		if *conv == "" {
			fmt.Fprint(errOut, "tollgate compact: no --conversation\n\n"+usage)
			return exitUsage
		}
		req := protocol.CompactRequest{Instructions: strings.TrimSpace(strings.Join(words, " "))}
		res, err := newClient().compact(ctx, *conv, req)
		if err != nil {
			fmt.Fprintf(errOut, "tollgate compact: %v\n", err)
			return exitFail
		}
		fmt.Fprintln(out, compactedSays(res))
		return exitOK
	case "policy":
		if len(rest) > 0 && rest[0] == "suggest" {
			since := fs.String("since", "30d", "how far back the ledger is read (30d, 36h)")
			minimum := fs.Int("min", suggest.DefaultMin, "approvals a pattern needs")
			tool := fs.String("tool", "", "only calls of tool `NAME`")
			words, err := parseInterspersed(fs, rest[1:])
			if err != nil {
				return exitUsage
			}
			from, err := parseSince(*since, time.Now())
			if err == nil && *minimum < 1 {
				err = fmt.Errorf("--min %d is not a positive number", *minimum)
			}
			if err == nil && len(words) > 0 {
				err = fmt.Errorf("unexpected %q", words)
			}
			if err == nil && *conv != "" {
				err = errors.New("--conversation is for policy test: suggestions read the whole ledger")
			}
			if err != nil {
				fmt.Fprintf(errOut, "tollgate policy suggest: %v\n\n%s", err, usage)
				return exitUsage
			}
			opts := suggestOptions{Since: from, Tool: *tool, Min: *minimum}
			if err := suggestRules(ctx, newClient(), opts, out); err != nil {
				fmt.Fprintf(errOut, "tollgate policy suggest: %v\n", err)
				return exitFail
			}
			return exitOK
		}
		return runPolicy(ctx, fs, rest, conv, newClient, out, errOut)
	case "freeze", "thaw":
		reason := fs.String("reason", "", "why, for the ledger and every open stream")
		block := false
		if cmd == "freeze" {
			fs.BoolVar(&block, "block-new-turns", false, "refuse new messages too")
		}
		words, err := parseInterspersed(fs, rest)
		if err != nil {
			return exitUsage
		}
		if len(words) > 0 {
			fmt.Fprintf(errOut, "tollgate %s: unexpected %q (a reason goes in --reason)\n\n%s", cmd, words, usage)
			return exitUsage
		}
		if cmd == "freeze" {
			err = freeze(ctx, newClient(), protocol.FreezeRequest{Reason: *reason, BlockNewTurns: block}, out)
		} else {
			err = thaw(ctx, newClient(), protocol.ThawRequest{Reason: *reason}, out)
		}
		if err != nil {
			fmt.Fprintf(errOut, "tollgate %s: %v\n", cmd, err)
			return exitFail
		}
		return exitOK
	case "audit":
		file := fs.String("file", "", "verify the export `EXPORT` offline")
		head := fs.String("expect-head", "", "a head `HASH` kept earlier")
		if len(rest) == 0 || rest[0] != "verify" {
			fmt.Fprint(errOut, "tollgate audit: verify?\n\n"+usage)
			return exitUsage
		}
		words, err := parseInterspersed(fs, rest[1:])
		if err != nil {
			return exitUsage
		}
		switch {
		case len(words) > 0:
			fmt.Fprintf(errOut, "tollgate audit verify: unexpected %q\n\n%s", words, usage)
			return exitUsage
		case *conv != "":
			fmt.Fprint(errOut, "tollgate audit verify: --conversation: the chain proves the whole ledger, not a conversation\n\n"+usage)
			return exitUsage
		}
		ok, err := verifyLedger(ctx, newClient(), verifyOptions{File: *file, ExpectHead: *head}, in, out)
		if err != nil {
			fmt.Fprintf(errOut, "tollgate audit verify: %v\n", err)
			return exitFail
		}
		if !ok {
			return exitFail
		}
		return exitOK
	case "help", "-h", "--help":
		fmt.Fprint(out, usage)
		return exitOK
	default:
		fmt.Fprintf(errOut, "tollgate: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
}

// runPolicy runs `tollgate policy test|check FILE`.
func runPolicy(ctx context.Context, fs *flag.FlagSet, args []string, conv *string, newClient func() *apiClient, out, errOut io.Writer) int {
	since := fs.String("since", "", "only calls asked since `WHEN`: 7d, 36h or an RFC 3339 time")
	if len(args) == 0 || (args[0] != "test" && args[0] != "check") {
		fmt.Fprint(errOut, "tollgate policy: test or check?\n\n"+usage)
		return exitUsage
	}
	sub := args[0]
	words, err := parseInterspersed(fs, args[1:])
	if err != nil {
		return exitUsage
	}
	if len(words) != 1 {
		fmt.Fprintf(errOut, "tollgate policy %s: one policy file, not %q\n\n%s", sub, words, usage)
		return exitUsage
	}
	opts := policyOptions{Backtest: sub == "test", File: words[0], ConversationID: *conv}
	if sub == "check" && (*since != "" || *conv != "") {
		fmt.Fprint(errOut, "tollgate policy check: --since and --conversation are for policy test\n\n"+usage)
		return exitUsage
	}
	if *since != "" {
		if opts.Since, err = parseSince(*since, time.Now()); err != nil {
			fmt.Fprintf(errOut, "tollgate policy %s: %v\n", sub, err)
			return exitUsage
		}
	}
	passed, err := policy(ctx, newClient(), opts, out)
	if err != nil {
		fmt.Fprintf(errOut, "tollgate policy %s: %v\n", sub, err)
		return exitFail
	}
	if !passed {
		return exitFail
	}
	return exitOK
}

// parseInterspersed parses flags wherever they stand among the words, as
// in `tollgate chat "hi" --bypass`, and returns the words. "--" ends the
// flags.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var words []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err // fs has printed what is wrong
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return words, nil
		}
		// fs.Parse stops at the first word, or after "--".
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(words, rest...), nil
		}
		words = append(words, rest[0])
		args = rest[1:]
	}
}
