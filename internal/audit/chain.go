package audit

import (
	"bufio"
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"time"
)

// The ledger's rows are updated in place as a call moves through its
// stages, so they cannot be chained themselves: the ledger keeps beside
// them an append-only chain with an entry for every version of a row it
// wrote, each hashed over the one before. An entry's hash is
//
//	SHA-256(previous entry's hash, 32 bytes || entry's content)
//
// with 32 zero bytes before the first entry; the content is the row's
// canonical JSON (Canonical) as that write left it. A row's Hash is its
// latest entry's. This file holds the hashing and the checks, so that the
// ledger, the API and the terminal client (which verifies an export
// offline) share them.

// Entry is one entry of the ledger's chain: a version of a row.
type Entry struct {
	// Seq numbers the entries from 1, without gaps.
	Seq   int64  `json:"seq"`
	ID    string `json:"id"`
	Stage int    `json:"stage"`
	// Content is the row's canonical JSON (Canonical) as it was written.
	Content  string `json:"content"`
	PrevHash string `json:"prevHash"`
	Hash     string `json:"hash"`
}

// GenesisHash is the PrevHash of the chain's first entry.
var GenesisHash = strings.Repeat("0", 2*sha256.Size)

// Canonical is r's content as the chain hashes it: its JSON without Hash,
// its times in UTC. It fails only for a time JSON cannot hold (a year past
// 9999).
func Canonical(r Record) ([]byte, error) {
	r.Hash = ""
	r.RequestedAt = r.RequestedAt.UTC()
	for _, t := range []**time.Time{&r.ExpiresAt, &r.DecidedAt, &r.FinishedAt} {
		if *t != nil {
			u := (*t).UTC()
			*t = &u
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("audit record %s: %w", r.ID, err)
	}
	return b, nil
}

// HashEntry is the hash of an entry of content after the entry whose hash
// is prev (GenesisHash for the first), in lowercase hex.
func HashEntry(prev string, content []byte) (string, error) {
	p, err := hex.DecodeString(prev)
	if err != nil || len(p) != sha256.Size {
		return "", fmt.Errorf("previous hash %q is not %d hex digits", prev, 2*sha256.Size)
	}
	h := sha256.New()
	h.Write(p)
	h.Write(content)
	return hex.EncodeToString(h.Sum(nil)), nil
}

// NextEntry is the entry of r after head (nil for the first).
func NextEntry(head *Entry, r Record) (Entry, error) {
	content, err := Canonical(r)
	if err != nil {
		return Entry{}, err
	}
	e := Entry{Seq: 1, ID: r.ID, Stage: r.Stage, Content: string(content), PrevHash: GenesisHash}
	if head != nil {
		e.Seq, e.PrevHash = head.Seq+1, head.Hash
	}
	if e.Hash, err = HashEntry(e.PrevHash, content); err != nil {
		return Entry{}, fmt.Errorf("the chain's head, entry %d: %w", head.Seq, err)
	}
	return e, nil
}

// Verification is what a check of the chain found: GET /audit/verify's
// body and what `tollgate audit verify` prints.
type Verification struct {
	// OK is true when every entry follows the one before and every row is
	// its latest entry.
	OK bool `json:"ok"`
	// Entries and Rows are how many were read.
	Entries int64 `json:"entries"`
	Rows    int64 `json:"rows"`
	// Head is the last entry's hash, and HeadSeq its seq: an operator who
	// keeps them elsewhere can later prove that no entry up to it was
	// removed or rewritten (Checker.Expect).
	Head    string `json:"head,omitempty"`
	HeadSeq int64  `json:"headSeq,omitempty"`
	// FirstBad is the first problem found: in the chain's order, then in
	// the rows' ids' order.
	FirstBad *Bad `json:"firstBad,omitempty"`
}

// Bad names a problem: the entry (Seq) or row (ID) and what is wrong.
type Bad struct {
	Seq     int64  `json:"seq,omitempty"`
	ID      string `json:"id,omitempty"`
	Problem string `json:"problem"`
}

// Checker checks a chain: each entry in seq order (Entry), then each row
// with its latest entry (Row), then each entry whose row is missing (Row
// with a nil row). It keeps the
// first problem and counts; it holds no entry or row past the call.
type Checker struct {
	v      Verification
	prev   string
	expect string
	found  bool
}

// Expect has the check require an entry whose hash is head: a head hash
// kept elsewhere earlier. Without it the chain's tail could be cut off
// unseen.
func (c *Checker) Expect(head string) { c.expect = strings.ToLower(strings.TrimSpace(head)) }

func (c *Checker) bad(seq int64, id, format string, args ...any) bool {
	if c.v.FirstBad == nil {
		c.v.FirstBad = &Bad{Seq: seq, ID: id, Problem: fmt.Sprintf(format, args...)}
	}
	return false
}

// Entry checks e, the entry after the last one given: its seq, its link
// to that entry, its hash and its content. It returns false once it found
// a problem (then the walk may stop: the rest is not proven).
func (c *Checker) Entry(e Entry) bool {
	c.v.Entries++
	wantSeq, prev := c.v.HeadSeq+1, c.prev
	if prev == "" {
		prev = GenesisHash
	}
	c.v.Head, c.v.HeadSeq = e.Hash, e.Seq
	c.prev = e.Hash
	if e.Hash == c.expect {
		c.found = true
	}
	switch {
	case e.Seq != wantSeq && wantSeq == 1:
		return c.bad(e.Seq, e.ID, "the chain begins at entry %d, not 1: the entries before it are missing", e.Seq)
	case e.Seq > wantSeq:
		return c.bad(e.Seq, e.ID, "entry %d follows entry %d: the entries between are missing", e.Seq, wantSeq-1)
	case e.Seq < wantSeq:
		return c.bad(e.Seq, e.ID, "entry %d comes after entry %d: the entries are out of order", e.Seq, wantSeq-1)
	case e.PrevHash != prev:
		return c.bad(e.Seq, e.ID, "entry %d's prevHash %s is not the hash of the entry before it, %s: an entry before it was changed, removed or reordered", e.Seq, e.PrevHash, prev)
	}
	if h, err := HashEntry(e.PrevHash, []byte(e.Content)); err != nil || h != e.Hash {
		return c.bad(e.Seq, e.ID, "entry %d's hash %s is not the hash of its content (%s): the entry was changed", e.Seq, e.Hash, h)
	}
	var r Record
	if err := json.Unmarshal([]byte(e.Content), &r); err != nil {
		return c.bad(e.Seq, e.ID, "entry %d's content is not a row: %v", e.Seq, err)
	}
	if r.ID != e.ID || r.Stage != e.Stage {
		return c.bad(e.Seq, e.ID, "entry %d is of row %q at stage %d, but its content is of row %q at stage %d", e.Seq, e.ID, e.Stage, r.ID, r.Stage)
	}
	return true
}

// Row checks a row against its latest entry: r nil is an entry whose row
// is missing, latest nil a row the chain does not hold.
func (c *Checker) Row(r *Record, latest *Entry) bool {
	if r != nil {
		c.v.Rows++
	}
	switch {
	case r == nil && latest == nil:
		return true
	case r == nil:
		return c.bad(latest.Seq, latest.ID, "row %s, of entry %d, is missing", latest.ID, latest.Seq)
	case latest == nil && r.Hash == "":
		// Written by a build without the chain (an earlier release's
		// worker, during a rolling upgrade), or by hand.
		return c.bad(0, r.ID, "row %s is in no entry of the chain, and has no hash: a worker or API of a release before the chain wrote it (upgrade every one), or someone wrote it by hand", r.ID)
	case latest == nil:
		return c.bad(0, r.ID, "row %s is in no entry of the chain", r.ID)
	}
	var written Record
	if err := json.Unmarshal([]byte(latest.Content), &written); err != nil {
		return c.bad(latest.Seq, r.ID, "entry %d's content is not a row: %v", latest.Seq, err)
	}
	want, err := Canonical(written)
	if err != nil {
		return c.bad(latest.Seq, r.ID, "entry %d's content is not a row: %v", latest.Seq, err)
	}
	got, err := Canonical(*r)
	if err != nil {
		return c.bad(latest.Seq, r.ID, "row %s is not as its latest entry, %d, wrote it: %v", r.ID, latest.Seq, err)
	}
	if diff := differences(want, got); diff != "" {
		return c.bad(latest.Seq, r.ID, "row %s is not as its latest entry, %d, wrote it: %s", r.ID, latest.Seq, diff)
	}
	if r.Hash != latest.Hash {
		return c.bad(latest.Seq, r.ID, "row %s's hash %s is not its latest entry's (%d), %s", r.ID, r.Hash, latest.Seq, latest.Hash)
	}
	return true
}

// differences names the fields of two JSON objects that differ: what the
// entry wrote, then what the row holds.
func differences(written, row []byte) string {
	var w, r map[string]json.RawMessage
	if json.Unmarshal(written, &w) != nil || json.Unmarshal(row, &r) != nil {
		return ""
	}
	keys := append(slices.Collect(maps.Keys(w)), slices.Collect(maps.Keys(r))...)
	slices.Sort(keys)
	var out []string
	for _, k := range slices.Compact(keys) {
		wv, rv := w[k], r[k]
		if bytes.Equal(wv, rv) {
			continue
		}
		show := func(v json.RawMessage) string {
			if v == nil {
				return "nothing"
			}
			s := string(v)
			if len(s) > 80 {
				s = s[:77] + "..."
			}
			return s
		}
		out = append(out, fmt.Sprintf("%s was %s, is %s", k, show(wv), show(rv)))
	}
	return strings.Join(out, "; ")
}

// Result is the verification: OK when nothing was found wrong.
func (c *Checker) Result() Verification {
	v := c.v
	if c.expect != "" && !c.found {
		c.bad(0, "", "no entry has the head hash %s that was kept: entries were removed or rewritten", c.expect)
		v.FirstBad = c.v.FirstBad
	}
	v.OK = v.FirstBad == nil
	return v
}

// ExportLine is a line of the ledger's JSONL export (GET
// /audit?format=jsonl): a row, or with chain=1 an entry of the chain
// (Chain), or the error that cut the export short.
type ExportLine struct {
	Record
	Chain *Entry `json:"chain,omitempty"`
	Error string `json:"error,omitempty"`
}

// MarshalJSON writes the line as what it is: a row as GET /audit's pages
// have it, {"chain": entry}, or {"error": why}.
func (l ExportLine) MarshalJSON() ([]byte, error) {
	switch {
	case l.Chain != nil:
		return json.Marshal(struct {
			Chain *Entry `json:"chain"`
		}{l.Chain})
	case l.Error != "":
		return json.Marshal(struct {
			Error string `json:"error"`
		}{l.Error})
	default:
		return json.Marshal(l.Record)
	}
}

// VerifyExport verifies a whole export with its chain (GET
// /audit?format=jsonl&chain=1), as Checker does the ledger: without the
// database, on what the file says. head, when set, is a head hash kept
// elsewhere (Checker.Expect).
func VerifyExport(in io.Reader, head string) (Verification, error) {
	var c Checker
	if head != "" {
		c.Expect(head)
	}
	rows := map[string]*Record{}
	latest := map[string]*Entry{}
	walking := true
	sc := bufio.NewScanner(in)
	sc.Buffer(nil, 64<<20)
	for n := 1; sc.Scan(); n++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var line ExportLine
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			return Verification{}, fmt.Errorf("line %d is not a row or an entry of the chain: %w", n, err)
		}
		switch {
		case line.Error != "":
			return Verification{}, fmt.Errorf("line %d: the export is cut short: %s", n, line.Error)
		case line.Chain != nil:
			if walking {
				walking = c.Entry(*line.Chain)
			} else {
				c.v.Entries++
			}
			latest[line.Chain.ID] = line.Chain
		default:
			if line.ID == "" {
				return Verification{}, fmt.Errorf("line %d is a row without an id", n)
			}
			if _, dup := rows[line.ID]; dup {
				c.bad(0, line.ID, "row %s is in the export twice", line.ID)
			}
			r := line.Record
			rows[r.ID] = &r
		}
	}
	if err := sc.Err(); err != nil {
		return Verification{}, fmt.Errorf("read the export: %w", err)
	}
	if c.v.Entries == 0 && len(rows) > 0 {
		return Verification{}, errors.New("the export holds no entry of the chain: export it with chain=1")
	}
	// As the ledger's Verify: the rows in their ids' order, then the
	// entries whose rows are missing, in the chain's.
	for _, id := range slices.Sorted(maps.Keys(rows)) {
		c.Row(rows[id], latest[id])
	}
	var missing []*Entry
	for id, e := range latest {
		if rows[id] == nil {
			missing = append(missing, e)
		}
	}
	slices.SortFunc(missing, func(a, b *Entry) int { return cmp.Compare(a.Seq, b.Seq) })
	for _, e := range missing {
		c.Row(nil, e)
	}
	return c.Result(), nil
}
