// Package auditdb keeps the audit ledger's rows (package audit) in a
// database: SQLite by default, a file both the worker and the API open (a
// pure-Go driver, modernc.org/sqlite), or PostgreSQL for a cluster (pgx).
// One schema serves both.
package auditdb

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver of database/sql
	"modernc.org/sqlite"               // the "sqlite" driver of database/sql
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/tollgate/tollgate/internal/audit"
	"github.com/tollgate/tollgate/internal/text"
)

// columns are the table's columns in Record's order.
var columns = []string{
	"id", "stage", "conversation_id", "turn_id", "workflow_id", "agent", "tool_call_id", "tool", "arguments", "asked",
	"sender", "requested_at", "expires_at", "decision", "decided_by", "principal", "role", "reason", "grant_id",
	"decided_at", "edited_arguments", "edit_diff", "outcome", "result", "finished_at",
	"preview", "user_message", "sandbox", "shadow", "on_behalf_of", "kind", "deciders", "votes",
}

// addedColumns are the columns added after the table was first made:
// migrate adds them to a table that lacks them, and rows written before
// read them as empty. hash, the last, is not Record's to write (Write
// sets it from the chain, chain.go), only to read.
var addedColumns = []string{"preview", "user_message", "sandbox", "shadow", "on_behalf_of", "kind", "deciders", "votes", hashColumn}

// hashColumn holds the hash of a row's latest entry in the chain.
const hashColumn = "hash"

// selected are the columns a read selects: Record's, then its hash.
var selected = strings.Join(append(slices.Clone(columns), hashColumn), ", ")

// keptWhenEmpty are the fields of row and had, a row as a write would leave
// it and as it is, that a row has from its first stage on and never
// changes: a later stage written without them (audit.Record.Trimmed)
// keeps what the row has.
func keptWhenEmpty(row, had *audit.Record) [][2]*string {
	return [][2]*string{{&row.Arguments, &had.Arguments}, {&row.Preview, &had.Preview}, {&row.UserMessage, &had.UserMessage}}
}

// stored is r as the database keeps it and a read returns it: its columns
// alone (a field of Record without one is not kept, so not chained), its
// text cleaned, its result cut (once: a cut result may be longer than the
// cut), its times to the microsecond, in UTC.
func stored(r audit.Record) (audit.Record, error) {
	var out audit.Record
	err := scan(&out, written(values(&r)))
	return out, err
}

// written is the values of a row's columns (args), read back as a query
// would answer them.
type written []any

// Scan sets each of dest to its value.
func (w written) Scan(dest ...any) error {
	if len(dest) != len(w) {
		return fmt.Errorf("%d values for %d columns", len(w), len(dest))
	}
	for i, d := range dest {
		ok := false
		switch d := d.(type) {
		case *string:
			*d, ok = w[i].(string)
		case *int:
			*d, ok = w[i].(int)
		case *int64:
			*d, ok = w[i].(int64)
		}
		if !ok {
			return fmt.Errorf("column %s: a %T read into a %T", columns[i], w[i], d)
		}
	}
	return nil
}

// args are the values of r's columns, in columns' order; r is stored's.
func args(r *audit.Record) []any {
	return []any{
		r.ID, r.Stage, r.ConversationID, r.TurnID, r.WorkflowID, r.Agent, r.ToolCallID, r.Tool, r.Arguments, r.Asked,
		r.Sender, micros(&r.RequestedAt), micros(r.ExpiresAt), r.Decision, r.DecidedBy, r.Principal, r.Role, r.Reason, r.Grant,
		micros(r.DecidedAt), r.EditedArguments, r.EditDiff, r.Outcome, r.Result, micros(r.FinishedAt),
		r.Preview, r.UserMessage, r.Sandbox, r.Shadow, r.OnBehalfOf, r.Kind, r.Deciders, r.Votes,
	}
}

// values cleans r's text and cuts its result, as the database keeps them,
// and returns its columns' values.
func values(r *audit.Record) []any {
	// PostgreSQL's text holds UTF-8 without NUL; a tool's output may have
	// any bytes.
	clean := func(s string) string { return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD") }
	for _, f := range []*string{&r.ConversationID, &r.TurnID, &r.WorkflowID, &r.Agent, &r.ToolCallID, &r.Tool, &r.Arguments, &r.Asked,
		&r.Sender, &r.Decision, &r.DecidedBy, &r.Principal, &r.Role, &r.Reason, &r.Grant, &r.EditedArguments, &r.EditDiff, &r.Outcome, &r.Result, &r.Preview, &r.UserMessage, &r.Sandbox, &r.Shadow, &r.OnBehalfOf, &r.Kind, &r.Deciders, &r.Votes} {
		*f = clean(*f)
	}
	r.Result = text.Truncate(r.Result, audit.MaxResult)
	return args(r)
}

// scan reads a row of columns, then of more (after them in the select).
func scan(r *audit.Record, s interface{ Scan(...any) error }, more ...any) error {
	var requested, expires, decided, finished int64
	err := s.Scan(append([]any{&r.ID, &r.Stage, &r.ConversationID, &r.TurnID, &r.WorkflowID, &r.Agent, &r.ToolCallID, &r.Tool, &r.Arguments, &r.Asked,
		&r.Sender, &requested, &expires, &r.Decision, &r.DecidedBy, &r.Principal, &r.Role, &r.Reason, &r.Grant,
		&decided, &r.EditedArguments, &r.EditDiff, &r.Outcome, &r.Result, &finished,
		&r.Preview, &r.UserMessage, &r.Sandbox, &r.Shadow, &r.OnBehalfOf, &r.Kind, &r.Deciders, &r.Votes}, more...)...)
	r.RequestedAt = time.UnixMicro(requested).UTC()
	r.ExpiresAt, r.DecidedAt, r.FinishedAt = fromMicros(expires), fromMicros(decided), fromMicros(finished)
	return err
}

// Times are kept as microseconds since the epoch (0 for none), the same in
// both databases: PostgreSQL's to_timestamp(requested_at / 1e6) shows one.
func micros(t *time.Time) int64 {
	if t == nil || t.IsZero() {
		return 0
	}
	return t.UnixMicro()
}

func fromMicros(us int64) *time.Time {
	if us == 0 {
		return nil
	}
	t := time.UnixMicro(us).UTC()
	return &t
}

// Ledger is an open audit database.
type Ledger struct {
	db       *sql.DB
	postgres bool
	where    string
	// read, upsert and appendEntry are Write's statements, made once in
	// the database's syntax and prepared once: a turn writes three rows a
	// protected call, each in a workflow task that waits for it. read
	// reads a row with its latest entry's content, upsert writes it whole
	// with its hash, appendEntry adds its entry to the chain.
	read, upsert, appendEntry *sql.Stmt
	// head reads the chain's last entry (headSQL).
	head *sql.Stmt
	// appendSQL is appendEntry's statement, and sealSQL sets a row's hash:
	// for the migration's transaction, which runs before Open prepares.
	appendSQL, sealSQL string
}

// Open opens the ledger at dsn and makes its table when it has none: a
// postgres:// (or postgresql://) URL is PostgreSQL; anything else is the
// path of a SQLite file, made with its folder when missing.
func Open(ctx context.Context, dsn string) (*Ledger, error) {
	l := &Ledger{}
	var err error
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		l.postgres, l.where = true, "PostgreSQL "+text.RedactURL(dsn)
		l.db, err = sql.Open("pgx", dsn)
	} else {
		l.where = "SQLite " + dsn
		if dir := filepath.Dir(dsn); dir != "" {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return nil, fmt.Errorf("audit ledger %s: %w", l.where, err)
			}
		}
		// WAL lets the API read while the worker writes; busy_timeout
		// makes a writer wait for another instead of failing.
		// A transaction takes the write lock when it begins (immediate),
		// so that one that would have to upgrade its read lock waits for
		// another writer instead of failing at once.
		l.db, err = sql.Open("sqlite", "file:"+dsn+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)&_pragma=synchronous(NORMAL)&_txlock=immediate")
	}
	if err != nil {
		return nil, fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	ph := make([]string, len(columns)+1)
	sets := make([]string, 0, len(columns))
	for i, c := range append(slices.Clone(columns), hashColumn) {
		ph[i] = l.placeholder(i + 1)
		if c != "id" {
			sets = append(sets, fmt.Sprintf("%s = excluded.%s", c, c))
		}
	}
	// Write decides what the row becomes (under the chain's lock, which
	// every writer takes): upsert writes it whole.
	upsert := "INSERT INTO tollgate_audit (" + selected + ") VALUES (" + strings.Join(ph, ", ") + ")" +
		" ON CONFLICT (id) DO UPDATE SET " + strings.Join(sets, ", ")
	read := "SELECT " + prefixed("a.", selected) + ", (SELECT c.content FROM tollgate_audit_chain c WHERE c.id = a.id ORDER BY c.seq DESC LIMIT 1)" +
		" FROM tollgate_audit a WHERE a.id = " + l.placeholder(1)
	l.appendSQL = fmt.Sprintf("INSERT INTO tollgate_audit_chain (seq, id, stage, content, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s)",
		l.placeholder(1), l.placeholder(2), l.placeholder(3), l.placeholder(4), l.placeholder(5), l.placeholder(6))
	l.sealSQL = fmt.Sprintf("UPDATE tollgate_audit SET hash = %s WHERE id = %s", l.placeholder(1), l.placeholder(2))
	if err := l.migrateWhenFree(ctx); err != nil {
		l.db.Close()
		return nil, fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	for _, p := range []struct {
		stmt **sql.Stmt
		sql  string
	}{{&l.read, read}, {&l.upsert, upsert}, {&l.appendEntry, l.appendSQL}, {&l.head, headSQL}} {
		if *p.stmt, err = l.db.PrepareContext(ctx, p.sql); err != nil {
			l.Close()
			return nil, fmt.Errorf("audit ledger %s: prepare the write: %w", l.where, err)
		}
	}
	return l, nil
}

// Where names the database, without a password, for logs and errors.
func (l *Ledger) Where() string { return l.where }

// Close closes the database.
func (l *Ledger) Close() error {
	var errs []error
	for _, st := range []*sql.Stmt{l.read, l.upsert, l.appendEntry, l.head} {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	return errors.Join(append(errs, l.db.Close())...)
}

// Ping checks that the database answers.
func (l *Ledger) Ping(ctx context.Context) error { return l.db.PingContext(ctx) }

// migrateWhenFree makes the table, trying again for a while where SQLite
// answers that the database is locked without waiting for it: a new file
// that a worker and an API open at the same moment is switched to WAL by
// one of them, and the other's first statement can fail at once (a bench
// run's worker stopped so).
func (l *Ledger) migrateWhenFree(ctx context.Context) error {
	deadline := time.Now().Add(sqliteBusyFor)
	for {
		err := l.migrate(ctx)
		var busy *sqlite.Error
		if l.postgres || !errors.As(err, &busy) || busy.Code()&0xff != sqlite3.SQLITE_BUSY || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// sqliteBusyFor is how long Open tries again when SQLite answers
// SQLITE_BUSY (its primary result code, the low byte of an extended one).
const sqliteBusyFor = 10 * time.Second

func (l *Ledger) migrate(ctx context.Context) error {
	defs := make([]string, len(columns))
	for i, c := range columns {
		switch c {
		case "id":
			defs[i] = "id TEXT PRIMARY KEY"
		case "stage", "requested_at", "expires_at", "decided_at", "finished_at":
			defs[i] = c + " BIGINT NOT NULL DEFAULT 0"
		default:
			defs[i] = c + " TEXT NOT NULL DEFAULT ''"
		}
	}
	defs = append(defs, hashColumn+" TEXT NOT NULL DEFAULT ''")
	stmts := []string{
		"CREATE TABLE IF NOT EXISTS tollgate_audit (" + strings.Join(defs, ", ") + ")",
		// The chain (chain.go): an entry for every version of a row a
		// write made, appended in seq order and never changed.
		"CREATE TABLE IF NOT EXISTS tollgate_audit_chain (seq BIGINT PRIMARY KEY, id TEXT NOT NULL, stage BIGINT NOT NULL," +
			" content TEXT NOT NULL, prev_hash TEXT NOT NULL, hash TEXT NOT NULL)",
		"CREATE INDEX IF NOT EXISTS tollgate_audit_chain_id ON tollgate_audit_chain (id, seq)",
		"CREATE INDEX IF NOT EXISTS tollgate_audit_requested ON tollgate_audit (requested_at, id)",
		"CREATE INDEX IF NOT EXISTS tollgate_audit_conversation ON tollgate_audit (conversation_id, requested_at)",
	}
	// GET /approvals lists the rows at stage asked, soonest to expire
	// first, unfiltered or by tool, conversation or sender (Pending): an
	// index each, holding only the asked rows, so that it stays as small as
	// what waits (and the terminated turns' rows until they expire) however
	// long the ledger grows. Pending's queries say "stage = 1" literally,
	// as a partial index needs.
	for _, ix := range []struct{ name, cols string }{
		{"tollgate_audit_pending", "expires_at, id"},
		{"tollgate_audit_pending_tool", "tool, expires_at, id"},
		{"tollgate_audit_pending_conversation", "conversation_id, expires_at, id"},
		{"tollgate_audit_pending_sender", "sender, expires_at, id"},
	} {
		stmts = append(stmts, fmt.Sprintf("CREATE INDEX IF NOT EXISTS %s ON tollgate_audit (%s) WHERE stage = %d", ix.name, ix.cols, audit.StageAsked))
	}
	// Workers and APIs start together and each makes the table when it is
	// missing; PostgreSQL's CREATE ... IF NOT EXISTS is not safe against a
	// concurrent one (the cluster test's two workers hit "duplicate key
	// ... pg_type_typname_nsp_index"), so the statements run in one
	// transaction under an advisory lock. SQLite's transaction, which takes
	// the write lock as it begins (_txlock=immediate), is enough.
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("make the table: %w", err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	if l.postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", migrationLock); err != nil {
			return fmt.Errorf("make the table: lock: %w", err)
		}
	}
	if _, err := tx.ExecContext(ctx, stmts[0]); err != nil {
		return fmt.Errorf("make the table: %w", err)
	}
	added, err := l.addColumns(ctx, tx)
	if err != nil {
		return err
	}
	for _, s := range stmts[1:] {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return fmt.Errorf("make the table: %w", err)
		}
	}
	// A table made before the chain gets it now: an entry for each of its
	// rows as it is, which proves them from this point on only. Only when
	// its hash column is new: a chain emptied later is not made again,
	// and Verify names the rows it lacks.
	if slices.Contains(added, hashColumn) {
		if err := l.genesis(ctx, tx); err != nil {
			return err
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("make the table: %w", err)
	}
	return nil
}

// addColumns adds the addedColumns a table made before them lacks, and
// returns those it added.
func (l *Ledger) addColumns(ctx context.Context, tx *sql.Tx) ([]string, error) {
	have := map[string]bool{}
	q := "SELECT name FROM pragma_table_info('tollgate_audit')"
	if l.postgres {
		q = "SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'tollgate_audit'"
	}
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return nil, fmt.Errorf("read the table's columns: %w", err)
	}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read the table's columns: %w", err)
		}
		have[name] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read the table's columns: %w", err)
	}
	var added []string
	for _, c := range addedColumns {
		if have[c] {
			continue
		}
		if _, err := tx.ExecContext(ctx, "ALTER TABLE tollgate_audit ADD COLUMN "+c+" TEXT NOT NULL DEFAULT ''"); err != nil {
			return nil, fmt.Errorf("add the column %s: %w", c, err)
		}
		added = append(added, c)
	}
	return added, nil
}

// migrationLock is the PostgreSQL advisory lock key the table's making
// holds: "tollgate" in ASCII, as a number.
const migrationLock int64 = 0x746f6c6c67617465

// placeholder is the i-th (from 1) bind parameter in the database's syntax.
func (l *Ledger) placeholder(i int) string {
	if l.postgres {
		return "$" + strconv.Itoa(i)
	}
	return "?" + strconv.Itoa(i)
}

// Write writes records in one transaction. A record replaces the row of its
// id unless that row is of a later stage, so writing the same records
// again (an activity's retry, a replay) changes nothing. Each row it
// changes gets an entry in the ledger's chain, in the same transaction
// (chain.go).
func (l *Ledger) Write(ctx context.Context, records []audit.Record) error {
	if len(records) == 0 {
		return nil
	}
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	defer tx.Rollback() //nolint:errcheck // a no-op after Commit
	// One writer at a time appends to the chain: SQLite's transaction
	// holds the write lock from its start (_txlock=immediate); PostgreSQL's
	// takes a lock first, before any row's, so that two writers never
	// wait for each other's.
	if l.postgres {
		if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", chainLock); err != nil {
			return fmt.Errorf("audit ledger %s: lock the chain: %w", l.where, err)
		}
	}
	upsert, appendEntry := tx.StmtContext(ctx, l.upsert), tx.StmtContext(ctx, l.appendEntry)
	var chain chainWriter
	for _, r := range records {
		if r.ID == "" || r.Tool == "" || r.Stage < audit.StageAsked || r.Stage > audit.StageEnded {
			return fmt.Errorf("audit record %q of tool %q at stage %d: an id, a tool and a stage from %d to %d are required", r.ID, r.Tool, r.Stage, audit.StageAsked, audit.StageEnded)
		}
		row, err := stored(r)
		if err != nil {
			return fmt.Errorf("audit ledger %s: write %s: %w", l.where, r.ID, err)
		}
		had, err := l.last(ctx, tx, r.ID)
		switch {
		case err != nil:
			return fmt.Errorf("audit ledger %s: read %s: %w", l.where, r.ID, err)
		case had == nil:
		case row.Stage < had.Stage:
			continue // a late write of an earlier stage
		default:
			for _, f := range keptWhenEmpty(&row, had) {
				if *f[0] == "" {
					*f[0] = *f[1]
				}
			}
			now, err := audit.Canonical(row)
			if err != nil {
				return fmt.Errorf("audit ledger %s: write %s: %w", l.where, r.ID, err)
			}
			if was, err := audit.Canonical(*had); err == nil && bytes.Equal(now, was) {
				continue // the row is as r would leave it: a retry
			}
		}
		e, err := chain.next(ctx, l, tx, row)
		if err != nil {
			return fmt.Errorf("audit ledger %s: chain %s: %w", l.where, r.ID, err)
		}
		if _, err := upsert.ExecContext(ctx, append(args(&row), e.Hash)...); err != nil {
			return fmt.Errorf("audit ledger %s: write %s: %w", l.where, r.ID, err)
		}
		if _, err := appendEntry.ExecContext(ctx, e.Seq, e.ID, e.Stage, e.Content, e.PrevHash, e.Hash); err != nil {
			return fmt.Errorf("audit ledger %s: chain %s: append entry %d: %w", l.where, r.ID, e.Seq, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	return nil
}

// Filter selects rows of the ledger; zero fields select everything.
type Filter struct {
	// RequestID selects the row of one request.
	RequestID    string
	Conversation string
	Principal    string
	Tool         string
	// Decision is approve, decline or timeout.
	Decision string
	// Shadow selects by what a shadow rule would have done: ShadowAny,
	// ShadowAgree or ShadowDisagree (audit.Record.Disagrees).
	Shadow string
	// Since and Until bound RequestedAt: Since <= requested < Until.
	Since, Until time.Time
	// Limit is the page size: 0 is DefaultLimit, at most MaxLimit.
	Limit int
	// Cursor is a Page's Next: the page after it.
	Cursor string
}

// What Filter.Shadow selects: rows with a shadow rule's verdict, those
// where it agrees with what the policy did, or those where it does not.
const (
	ShadowAny      = "any"
	ShadowAgree    = "agree"
	ShadowDisagree = "disagree"
)

// Page sizes of List.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// Page is a page of rows, newest request first, and the cursor of the next
// page, empty on the last.
type Page struct {
	Records []audit.Record `json:"records"`
	Next    string         `json:"next,omitempty"`
}

// ErrBadCursor is returned for a cursor that List did not make.
var ErrBadCursor = errors.New("not a cursor of this ledger")

// List returns the page of rows f selects.
func (l *Ledger) List(ctx context.Context, f Filter) (Page, error) { return l.list(ctx, l.db, f) }

// querier is the database, or a transaction of it.
type querier interface {
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

func (l *Ledger) list(ctx context.Context, db querier, f Filter) (Page, error) {
	limit := f.Limit
	if limit <= 0 {
		limit = DefaultLimit
	}
	limit = min(limit, MaxLimit)
	c := &conditions{l: l}
	add := c.add
	if f.RequestID != "" {
		add("id = ?", f.RequestID)
	}
	if f.Conversation != "" {
		add("conversation_id = ?", f.Conversation)
	}
	if f.Principal != "" {
		add("principal = ?", f.Principal)
	}
	if f.Tool != "" {
		add("tool = ?", f.Tool)
	}
	if f.Decision != "" {
		add("decision = ?", f.Decision)
	}
	switch f.Shadow {
	case ShadowAny:
		add("shadow <> ''")
	case ShadowAgree, ShadowDisagree:
		// As audit.Record.Disagrees: a shadow rule disagrees when it would
		// not have asked of a call the policy did not let run unasked, or
		// would have asked of one it did.
		cond := "shadow <> '' AND ((shadow = ?) = (decided_by <> ?))"
		if f.Shadow == ShadowAgree {
			cond = "shadow <> '' AND ((shadow = ?) <> (decided_by <> ?))"
		}
		add(cond, audit.ShadowWouldNotAsk, audit.DecidedByPolicy)
	}
	if !f.Since.IsZero() {
		add("requested_at >= ?", f.Since.UnixMicro())
	}
	if !f.Until.IsZero() {
		add("requested_at < ?", f.Until.UnixMicro())
	}
	if f.Cursor != "" {
		at, id, err := decodeCursor(f.Cursor)
		if err != nil {
			return Page{}, err
		}
		add("(requested_at < ? OR (requested_at = ? AND id < ?))", at, at, id)
	}
	q := "SELECT " + selected + " FROM tollgate_audit"
	if len(c.where) > 0 {
		q += " WHERE " + strings.Join(c.where, " AND ")
	}
	q += fmt.Sprintf(" ORDER BY requested_at DESC, id DESC LIMIT %d", limit+1)
	rows, err := db.QueryContext(ctx, q, c.args...)
	if err != nil {
		return Page{}, fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	defer rows.Close()
	page := Page{Records: []audit.Record{}}
	for rows.Next() {
		var r audit.Record
		if err := scan(&r, rows, &r.Hash); err != nil {
			return Page{}, fmt.Errorf("audit ledger %s: %w", l.where, err)
		}
		page.Records = append(page.Records, r)
	}
	if err := rows.Err(); err != nil {
		return Page{}, fmt.Errorf("audit ledger %s: %w", l.where, err)
	}
	if len(page.Records) > limit {
		page.Records = page.Records[:limit]
		last := page.Records[limit-1]
		page.Next = encodeCursor(last.RequestedAt.UnixMicro(), last.ID)
	}
	return page, nil
}

// Each calls fn with every row of conversation (every conversation's, when
// "") asked at or after since (all, when zero), newest first, reading
// MaxLimit rows at a time: a policy's backtest reads the whole window in
// bounded memory. An error of fn stops it and is returned.
func (l *Ledger) Each(ctx context.Context, conversation string, since time.Time, fn func(audit.Record) error) error {
	f := Filter{Conversation: conversation, Since: since, Limit: MaxLimit}
	for {
		page, err := l.List(ctx, f)
		if err != nil {
			return err
		}
		for _, r := range page.Records {
			if err := fn(r); err != nil {
				return err
			}
		}
		if page.Next == "" {
			return nil
		}
		f.Cursor = page.Next
	}
}

func encodeCursor(at int64, id string) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(at, 10) + "|" + id))
}

func decodeCursor(c string) (int64, string, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return 0, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	at, id, ok := strings.Cut(string(b), "|")
	n, err := strconv.ParseInt(at, 10, 64)
	if !ok || err != nil || id == "" {
		return 0, "", fmt.Errorf("cursor %q: %w", c, ErrBadCursor)
	}
	return n, id, nil
}

// PendingFilter selects the rows that wait for a decision: at stage asked
// and not expired. Zero fields select everything.
type PendingFilter struct {
	Conversation string
	Tool         string
	// Sender is who sent the message that led to the call.
	Sender string
	// Now is the time the rows' expiry is measured against: a row that
	// expires at Now or before is left out (its turn's timer declines it,
	// or declined it already).
	Now time.Time
	// After, when set, is the last row of the page before.
	After *PendingKey
	// Limit is the page size: 0 is MaxLimit, at most MaxLimit.
	Limit int
}

// PendingKey is where a row stands in Pending's order.
type PendingKey struct {
	// ExpiresAt is the row's expiry, in microseconds since the epoch, as
	// the ledger keeps it.
	ExpiresAt int64
	ID        string
}

// KeyOf is r's place in Pending's order.
func KeyOf(r audit.Record) PendingKey { return PendingKey{ExpiresAt: micros(r.ExpiresAt), ID: r.ID} }

// Pending returns the rows f selects, soonest to expire first (then by
// id), and whether more follow. It reads the partial indexes migrate makes
// and nothing of the rows of calls already decided.
func (l *Ledger) Pending(ctx context.Context, f PendingFilter) ([]audit.Record, bool, error) {
	limit := f.Limit
	if limit <= 0 || limit > MaxLimit {
		limit = MaxLimit
	}
	c := l.pendingWhere(f)
	if f.After != nil {
		c.add("(expires_at, id) > (?, ?)", f.After.ExpiresAt, f.After.ID)
	}
	q := "SELECT " + selected + " FROM tollgate_audit WHERE " + strings.Join(c.where, " AND ") +
		fmt.Sprintf(" ORDER BY expires_at, id LIMIT %d", limit+1)
	rows, err := l.db.QueryContext(ctx, q, c.args...)
	if err != nil {
		return nil, false, fmt.Errorf("audit ledger %s: pending rows: %w", l.where, err)
	}
	defer rows.Close()
	out := []audit.Record{}
	for rows.Next() {
		var r audit.Record
		if err := scan(&r, rows, &r.Hash); err != nil {
			return nil, false, fmt.Errorf("audit ledger %s: pending rows: %w", l.where, err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, false, fmt.Errorf("audit ledger %s: pending rows: %w", l.where, err)
	}
	if len(out) > limit {
		return out[:limit], true, nil
	}
	return out, false, nil
}

// CountPending counts the rows f selects, ignoring its After and Limit.
func (l *Ledger) CountPending(ctx context.Context, f PendingFilter) (int, error) {
	c := l.pendingWhere(f)
	var n int
	err := l.db.QueryRowContext(ctx, "SELECT count(*) FROM tollgate_audit WHERE "+strings.Join(c.where, " AND "), c.args...).Scan(&n)
	if err != nil {
		return 0, fmt.Errorf("audit ledger %s: count pending rows: %w", l.where, err)
	}
	return n, nil
}

// pendingWhere is the condition of Pending's rows but for the page's.
func (l *Ledger) pendingWhere(f PendingFilter) *conditions {
	now := f.Now
	if now.IsZero() {
		now = time.Now()
	}
	// The stage is written out, not bound: the partial indexes are only
	// used for a condition that names their own.
	c := &conditions{l: l, where: []string{fmt.Sprintf("stage = %d", audit.StageAsked)}}
	c.add("expires_at > ?", now.UnixMicro())
	if f.Conversation != "" {
		c.add("conversation_id = ?", f.Conversation)
	}
	if f.Tool != "" {
		c.add("tool = ?", f.Tool)
	}
	if f.Sender != "" {
		c.add("sender = ?", f.Sender)
	}
	return c
}

// conditions are a query's WHERE conditions and their arguments, in the
// ledger's database's placeholders.
type conditions struct {
	l     *Ledger
	where []string
	args  []any
}

// add adds cond, whose every ? takes the next of vs.
func (c *conditions) add(cond string, vs ...any) {
	parts := strings.Split(cond, "?")
	var b strings.Builder
	for i, p := range parts {
		b.WriteString(p)
		if i < len(vs) {
			c.args = append(c.args, vs[i])
			b.WriteString(c.l.placeholder(len(c.args)))
		}
	}
	c.where = append(c.where, b.String())
}
