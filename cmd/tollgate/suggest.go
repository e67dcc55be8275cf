package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/suggest"
	"github.com/tollgate/tollgate/internal/text"
)

// suggestOptions are what `tollgate policy suggest` reads of the ledger.
type suggestOptions struct {
	// Since is the oldest row read; Tool, when set, keeps one tool's.
	Since time.Time
	Tool  string
	// Min is the approvals a pattern needs.
	Min int
}

// suggestRules reads the ledger's rows since o.Since through GET
// /audit (its export, in bounded memory on the API's side) and writes
// the rules and grants that would have answered what people approved many
// times and never declined (package suggest). It applies nothing.
func suggestRules(ctx context.Context, c *apiClient, o suggestOptions, out io.Writer) error {
	rows, err := c.auditRows(ctx, o.Since, o.Tool)
	if err != nil {
		return err
	}
	found := suggest.Suggest(rows, suggest.Options{Min: o.Min})
	if len(found) == 0 {
		fmt.Fprintf(out, "No suggestion: in %d rows since %s, no pattern was approved %d times without a decline or an edit.\n",
			len(rows), o.Since.UTC().Format(time.RFC3339), o.Min)
		return nil
	}
	fmt.Fprintf(out, "%d %s from %d rows since %s, to review (nothing is applied):\n",
		len(found), text.Plural(len(found), "suggestion"), len(rows), o.Since.UTC().Format(time.RFC3339))
	for _, s := range found {
		fmt.Fprintln(out)
		s.Write(out)
	}
	return nil
}

// auditRows reads every row of the ledger requested since then (of tool,
// when set), from GET /audit's JSONL export.
func (c *apiClient) auditRows(ctx context.Context, since time.Time, tool string) ([]audit.Record, error) {
	q := url.Values{"format": {"jsonl"}, "since": {since.UTC().Format(time.RFC3339)}}
	if tool != "" {
		q.Set("tool", tool)
	}
	r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/audit?"+q.Encode(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := c.do(r)
	if err != nil {
		return nil, err // names the method and URL
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, apiError(r, resp)
	}
	var rows []audit.Record
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 64<<20)
	for sc.Scan() {
		var line struct {
			audit.Record
			Error string `json:"error"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return nil, fmt.Errorf("GET /audit: a line is not a row: %w", err)
		}
		if line.Error != "" {
			return nil, fmt.Errorf("GET /audit: %s", line.Error)
		}
		rows = append(rows, line.Record)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("GET /audit: %w", err)
	}
	return rows, nil
}
