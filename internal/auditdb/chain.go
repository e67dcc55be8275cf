package auditdb

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/tollgate/tollgate/internal/audit"
)

// The chain (package audit's chain.go) is the table tollgate_audit_chain:
// an entry for every version of a row that a write made, appended in the
// write's transaction, one writer at a time; each row's hash column is its
// latest entry's.

// chainLock is the PostgreSQL advisory lock key a write holds while it
// appends to the chain: "tgchain1" in ASCII, as a number.
const chainLock int64 = 0x7467636861696e31

// entryColumns are the chain's columns in audit.Entry's order.
const entryColumns = "seq, id, stage, content, prev_hash, hash"

// headSQL reads the chain's last entry.
const headSQL = "SELECT " + entryColumns + " FROM tollgate_audit_chain ORDER BY seq DESC LIMIT 1"

// chainPage is how many entries or rows a read of the chain takes at once.
const chainPage = 1000

func scanEntry(e *audit.Entry, s interface{ Scan(...any) error }) error {
	return s.Scan(&e.Seq, &e.ID, &e.Stage, &e.Content, &e.PrevHash, &e.Hash)
}

// chainWriter makes the entries of one transaction, which holds the
// chain's lock.
type chainWriter struct {
	head   *audit.Entry
	loaded bool
}

// next is the entry of row, as a write leaves it, after the chain's head
// (the last entry next made, or the chain's last).
func (w *chainWriter) next(ctx context.Context, l *Ledger, tx *sql.Tx, row audit.Record) (audit.Entry, error) {
	if !w.loaded {
		var head audit.Entry
		var q *sql.Row
		if l.head != nil {
			q = tx.StmtContext(ctx, l.head).QueryRowContext(ctx)
		} else {
			q = tx.QueryRowContext(ctx, headSQL) // in the migration, before Open prepares l.head
		}
		err := scanEntry(&head, q)
		switch {
		case errors.Is(err, sql.ErrNoRows):
		case err != nil:
			return audit.Entry{}, fmt.Errorf("read the chain's head: %w", err)
		default:
			w.head = &head
		}
		w.loaded = true
	}
	e, err := audit.NextEntry(w.head, row)
	if err != nil {
		return audit.Entry{}, err
	}
	w.head = &e
	return e, nil
}

// last is the row of id as its latest entry wrote it, which a write builds
// on: a row changed in the table since (by hand) is not carried into the
// chain, and a retry is recognised as what the chain holds. A row the chain
// has none of (written by an older build after the chain was made) is
// taken as the table has it; nil when the table has no row.
func (l *Ledger) last(ctx context.Context, tx *sql.Tx, id string) (*audit.Record, error) {
	var r audit.Record
	var content sql.NullString
	err := scan(&r, tx.StmtContext(ctx, l.read).QueryRowContext(ctx, id), &r.Hash, &content)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return nil, nil
	case err != nil:
		return nil, err
	case !content.Valid:
		return &r, nil
	}
	var written audit.Record
	if err := json.Unmarshal([]byte(content.String), &written); err != nil {
		return nil, fmt.Errorf("its latest entry is not a row: %w", err)
	}
	return &written, nil
}

// genesis gives each row of a table made before the chain an entry, as it
// is: in the migration's transaction, which holds the migration's lock.
func (l *Ledger) genesis(ctx context.Context, tx *sql.Tx) error {
	var w chainWriter
	// Pages by id, each read whole before its entries are written (one
	// connection cannot read and write at once).
	after := ""
	for {
		rows, err := tx.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM tollgate_audit WHERE id > %s ORDER BY id LIMIT %d",
			strings.Join(columns, ", "), l.placeholder(1), chainPage), after)
		if err != nil {
			return fmt.Errorf("chain the rows: %w", err)
		}
		var page []audit.Record
		for rows.Next() {
			var r audit.Record
			if err := scan(&r, rows); err != nil {
				rows.Close()
				return fmt.Errorf("chain the rows: %w", err)
			}
			page = append(page, r)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("chain the rows: %w", err)
		}
		for _, r := range page {
			e, err := w.next(ctx, l, tx, r)
			if err == nil {
				_, err = tx.ExecContext(ctx, l.appendSQL, e.Seq, e.ID, e.Stage, e.Content, e.PrevHash, e.Hash)
			}
			if err == nil {
				_, err = tx.ExecContext(ctx, l.sealSQL, e.Hash, e.ID)
			}
			if err != nil {
				return fmt.Errorf("chain the row %s: %w", r.ID, err)
			}
		}
		if len(page) < chainPage {
			return nil
		}
		after = page[len(page)-1].ID
	}
}

// snapshot begins a read-only transaction that sees the ledger as it was
// when it began, while writers go on: PostgreSQL's repeatable read;
// SQLite's deferred transaction, whose snapshot (in WAL mode) takes no
// lock a writer waits for.
func (l *Ledger) snapshot(ctx context.Context) (*sql.Tx, error) {
	opts := &sql.TxOptions{ReadOnly: true}
	if l.postgres {
		opts.Isolation = sql.LevelRepeatableRead
	}
	tx, err := l.db.BeginTx(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	return tx, nil
}

// eachEntry calls fn with every entry of the chain, in seq order.
func (l *Ledger) eachEntry(ctx context.Context, tx *sql.Tx, fn func(audit.Entry) error) error {
	after := int64(0)
	for {
		rows, err := tx.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM tollgate_audit_chain WHERE seq > %s ORDER BY seq LIMIT %d",
			entryColumns, l.placeholder(1), chainPage), after)
		if err != nil {
			return fmt.Errorf("read the chain: %w", err)
		}
		var page []audit.Entry
		for rows.Next() {
			var e audit.Entry
			if err := scanEntry(&e, rows); err != nil {
				rows.Close()
				return fmt.Errorf("read the chain: %w", err)
			}
			page = append(page, e)
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return fmt.Errorf("read the chain: %w", err)
		}
		for _, e := range page {
			if err := fn(e); err != nil {
				return err
			}
		}
		if len(page) < chainPage {
			return nil
		}
		after = page[len(page)-1].Seq
	}
}

// Verify checks the chain and the rows, as they are at one moment: every
// entry follows the one before (its seq, its link, its hash), every row is
// as its latest entry wrote it and has that entry's hash, and every entry's
// row is there. head, when set, is a head hash kept elsewhere, which an
// entry must have (audit.Checker.Expect). The first problem is named in
// the answer's FirstBad; an error is a ledger that could not be read.
func (l *Ledger) Verify(ctx context.Context, head string) (audit.Verification, error) {
	tx, err := l.snapshot(ctx)
	if err != nil {
		return audit.Verification{}, err
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	var c audit.Checker
	if head != "" {
		c.Expect(head)
	}
	if err := l.eachEntry(ctx, tx, func(e audit.Entry) error { c.Entry(e); return nil }); err != nil {
		return audit.Verification{}, fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	// Each row with its latest entry, a page of rows at a time.
	latest := "(SELECT max(d.seq) FROM tollgate_audit_chain d WHERE d.id = a.id)"
	var cols []string
	for _, col := range strings.Split(selected, ", ") {
		cols = append(cols, "a."+col)
	}
	for _, col := range strings.Split(entryColumns, ", ") {
		cols = append(cols, "c."+col)
	}
	after := ""
	for first := true; ; first = false {
		cond := "a.id > " + l.placeholder(1)
		args := []any{after}
		if first {
			cond, args = "1 = 1", nil // "" may be an id, if a strange one
		}
		rows, err := tx.QueryContext(ctx, fmt.Sprintf("SELECT %s FROM tollgate_audit a LEFT JOIN tollgate_audit_chain c ON c.seq = %s WHERE %s ORDER BY a.id LIMIT %d",
			strings.Join(cols, ", "), latest, cond, chainPage), args...)
		if err != nil {
			return audit.Verification{}, fmt.Errorf("audit ledger %s: read the rows: %w", l.where, err)
		}
		n := 0
		for rows.Next() {
			var r audit.Record
			var seq, stage sql.NullInt64
			var id, content, prev, hash sql.NullString
			if err := scan(&r, rows, &r.Hash, &seq, &id, &stage, &content, &prev, &hash); err != nil {
				rows.Close()
				return audit.Verification{}, fmt.Errorf("audit ledger %s: read the rows: %w", l.where, err)
			}
			var e *audit.Entry
			if seq.Valid {
				e = &audit.Entry{Seq: seq.Int64, ID: id.String, Stage: int(stage.Int64), Content: content.String, PrevHash: prev.String, Hash: hash.String}
			}
			c.Row(&r, e)
			after = r.ID
			n++
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return audit.Verification{}, fmt.Errorf("audit ledger %s: read the rows: %w", l.where, err)
		}
		if n < chainPage {
			break
		}
	}
	// The first entry whose row is missing, if any.
	var gone audit.Entry
	err = scanEntry(&gone, tx.QueryRowContext(ctx, "SELECT "+prefixed("c.", entryColumns)+" FROM tollgate_audit_chain c"+
		" WHERE NOT EXISTS (SELECT 1 FROM tollgate_audit a WHERE a.id = c.id)"+
		" AND c.seq = (SELECT max(d.seq) FROM tollgate_audit_chain d WHERE d.id = c.id) ORDER BY c.seq LIMIT 1"))
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return audit.Verification{}, fmt.Errorf("audit ledger %s: read the chain: %w", l.where, err)
	default:
		c.Row(nil, &gone)
	}
	return c.Result(), nil
}

// prefixed is the comma-separated names cols, each with prefix.
func prefixed(prefix, cols string) string {
	return prefix + strings.ReplaceAll(cols, ", ", ", "+prefix)
}

// Export calls fn with every row f selects, newest first, as List pages
// them, and when chain with every entry of the chain after them, in seq
// order: all as they were at one moment, so that the export verifies
// offline (audit.VerifyExport) whatever was written meanwhile. f's Limit
// and Cursor are the pages'. An error of fn stops it and is returned.
func (l *Ledger) Export(ctx context.Context, f Filter, chain bool, fn func(audit.ExportLine) error) error {
	tx, err := l.snapshot(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback() //nolint:errcheck // read-only
	f.Limit = MaxLimit
	for {
		page, err := l.list(ctx, tx, f)
		if err != nil {
			return err
		}
		for _, r := range page.Records {
			if err := fn(audit.ExportLine{Record: r}); err != nil {
				return err
			}
		}
		if page.Next == "" {
			break
		}
		f.Cursor = page.Next
	}
	if !chain {
		return nil
	}
	return l.eachEntry(ctx, tx, func(e audit.Entry) error { return fn(audit.ExportLine{Chain: &e}) })
}
