package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"

	"github.com/tollgate/tollgate/internal/audit"
)

// verifyOptions are what `tollgate audit verify` checks.
type verifyOptions struct {
	// File, when set, is an export of the ledger with its chain (GET
	// /audit?format=jsonl&chain=1), verified here without the API ("-" is
	// the standard input).
	File string
	// ExpectHead, when set, is a head hash kept earlier, which an entry
	// must still have.
	ExpectHead string
}

// verifyLedger checks the audit ledger's chain, through GET /audit/verify
// or offline on an export, and prints what it found. It returns whether
// the ledger holds together; an error is a check that could not be made.
func verifyLedger(ctx context.Context, c *apiClient, o verifyOptions, in io.Reader, out io.Writer) (bool, error) {
	var v audit.Verification
	switch {
	case o.File != "":
		f := in
		if o.File != "-" {
			file, err := os.Open(o.File)
			if err != nil {
				return false, err
			}
			defer file.Close()
			f = file
		}
		var err error
		if v, err = audit.VerifyExport(f, o.ExpectHead); err != nil {
			return false, fmt.Errorf("%s: %w", o.File, err)
		}
	default:
		q := url.Values{}
		if o.ExpectHead != "" {
			q.Set("expectHead", o.ExpectHead)
		}
		r, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/audit/verify?"+q.Encode(), nil)
		if err != nil {
			return false, err
		}
		if err := c.doJSON(r, &v); err != nil {
			return false, err
		}
	}
	if v.OK {
		fmt.Fprintf(out, "ok: %d entries and %d rows hold together.\n", v.Entries, v.Rows)
	} else {
		b := v.FirstBad
		fmt.Fprintf(out, "BROKEN: %s\n", b.Problem)
		switch {
		case b.Seq != 0 && b.ID != "":
			fmt.Fprintf(out, "  first bad: entry %d, row %s\n", b.Seq, b.ID)
		case b.Seq != 0:
			fmt.Fprintf(out, "  first bad: entry %d\n", b.Seq)
		case b.ID != "":
			fmt.Fprintf(out, "  first bad: row %s\n", b.ID)
		}
		fmt.Fprintf(out, "  read %d entries and %d rows\n", v.Entries, v.Rows)
	}
	if v.HeadSeq > 0 {
		fmt.Fprintf(out, "head: entry %d %s\n", v.HeadSeq, v.Head)
		if v.OK {
			fmt.Fprintln(out, "Keep the head elsewhere: a later `tollgate audit verify --expect-head HASH` proves no entry up to it was removed or rewritten.")
		}
	}
	return v.OK, nil
}
