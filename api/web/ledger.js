// The audit ledger: every call the gate asked about, newest first, from
// GET /audit, with its filters, a page at a time ("Older rows" follows the
// page's cursor), and an export of everything the filters select as JSONL.
// It reads; it decides nothing. It loads again when a filter changes, not
// on a timer: a ledger is read, not watched.
'use strict';

(() => {
  const { h } = TG;
  // A page is 50 rows, or ?limit= of the address.
  const pageSize = Math.min(Math.max(Number(new URLSearchParams(location.search).get('limit')) || 50, 1), 1000);
  const filterDelay = 300;

  const body = document.getElementById('rows');
  const empty = document.getElementById('ledger-empty');
  const count = document.getElementById('ledger-count');
  const statusEl = document.getElementById('ledger-status');
  const errorEl = document.getElementById('ledger-error');
  const more = document.getElementById('more');
  const filters = ['conversationId', 'principal', 'tool', 'decision', 'shadow', 'since', 'until']
    .map((name) => document.getElementById(`filter-${name}`));

  // The filters live in the address, so a filtered ledger can be shared.
  const params = new URLSearchParams(location.search);
  for (const el of filters) el.value = fromQuery(el, params.get(el.name) || '');

  // Times are shown and typed in local time; the API takes RFC 3339.
  function fromQuery(el, v) {
    if (el.type !== 'datetime-local' || !v) return v;
    const d = new Date(v);
    if (Number.isNaN(d.getTime())) return '';
    const local = new Date(d.getTime() - d.getTimezoneOffset() * 60000);
    return local.toISOString().slice(0, 16);
  }

  function filterQuery() {
    const q = new URLSearchParams();
    for (const el of filters) {
      let v = el.value.trim();
      if (!v) continue;
      if (el.type === 'datetime-local') v = new Date(v).toISOString().replace(/\.\d{3}Z$/, 'Z');
      q.set(el.name, v);
    }
    return q;
  }

  function when(t) {
    return t ? new Date(t).toLocaleString() : '';
  }

  // shadow says what the shadow rule of the row's tool would have done,
  // marked when it would have done otherwise than the policy did: not ask
  // of a call that asked (or that a grant or the sandbox answered), or ask
  // of one no rule asked about (decidedBy policy). As the API's
  // shadow=disagree.
  function shadow(r) {
    if (!r.shadow) return null;
    const disagrees = (r.shadow === 'would not ask') === (r.decidedBy !== 'policy');
    return h('div', {
      class: 'badge', testid: 'shadow', 'data-status': disagrees ? 'declined' : 'ok', 'data-disagrees': String(disagrees),
      title: disagrees ? 'the shadow rule would have done otherwise' : 'the shadow rule would have done the same',
    }, `shadow: ${r.shadow}`);
  }

  function row(r) {
    // Stage 1 waits for its decision; stage 2 is decided, its batch not
    // yet ended; stage 3 has its outcome.
    // An admin's row (a freeze, a stand-in) says its kind.
    const decision = r.kind || r.decision || 'waiting';
    const outcome = r.kind ? '' : r.outcome || (r.stage === 1 ? 'waiting' : 'not ended yet');
    const call = h('td', { class: 'ledger-call' },
      h('span', { class: 'tool-name' }, r.tool), ' ',
      h('span', { class: 'call-summary' }, TG.summary(r.tool, r.arguments)),
      h('div', { class: 'where' },
        r.agent ? [`subagent ${r.agent} · `] : [],
        'conversation ', h('a', { href: `/?conversation=${encodeURIComponent(r.conversationId)}&turn=${encodeURIComponent(r.turnId)}` }, r.conversationId),
        r.sender ? ` · sent by ${r.sender}` : ''),
      r.editDiff ? h('pre', { class: 'edit-diff', testid: 'edit-diff', title: 'what the person changed before approving' }, r.editDiff) : null,
      h('details', { class: 'args' }, h('summary', {}, 'arguments'), TG.argsView(r.arguments)),
      r.result ? h('details', { class: 'args' }, h('summary', {}, 'result'), h('pre', {}, r.result)) : null);
    return h('tr', { testid: 'ledger-row', 'data-id': r.id, 'data-tool': r.tool, 'data-decision': decision, 'data-outcome': outcome },
      h('td', { class: 'times' }, when(r.requestedAt)),
      call,
      h('td', { class: 'asked' }, r.asked || (r.decidedBy === 'policy' ? 'no rule asked' : ''), shadow(r)),
      h('td', { testid: 'decision', class: `ledger-decision decision-${decision}` }, decision, r.reason ? h('div', { class: 'where' }, `“${r.reason}”`) : null,
        r.decidedAt ? h('div', { class: 'times' }, when(r.decidedAt)) : null),
      h('td', { testid: 'by' }, [r.principal, r.onBehalfOf ? `for ${r.onBehalfOf}` : '', r.role ? `(${r.role})` : '', r.decidedBy && r.decidedBy !== 'person' ? r.decidedBy : ''].filter(Boolean).join(' ')),
      h('td', { testid: 'outcome', class: `outcome-${outcome}` }, outcome.replace('_', ' ')));
  }

  let generation = 0;
  let cursor = '';
  let shown = 0;

  // load reads a page: the first under the filters (replacing the rows),
  // or the next one after cursor. A slower answer to an older filter is
  // dropped.
  async function load(next) {
    const gen = next ? generation : ++generation;
    const q = filterQuery();
    q.set('limit', String(pageSize));
    if (next) q.set('cursor', cursor);
    statusEl.dataset.state = 'idle';
    statusEl.textContent = 'loading…';
    try {
      const resp = await fetch(`/audit?${q}`, { headers: TG.authHeaders({ Accept: 'application/json' }) });
      const out = await resp.json().catch(() => ({}));
      if (gen !== generation) return;
      if (!resp.ok) throw new Error(out.error || `HTTP ${resp.status}`);
      if (!next) {
        body.replaceChildren();
        shown = 0;
      }
      for (const r of out.records || []) body.append(row(r));
      shown += (out.records || []).length;
      cursor = out.next || '';
      more.hidden = !cursor;
      empty.hidden = shown > 0;
      count.textContent = `${shown}${cursor ? '+' : ''} rows`;
      errorEl.textContent = '';
      statusEl.dataset.state = 'live';
      statusEl.textContent = `read ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (gen !== generation) return;
      errorEl.textContent = `could not read the ledger: ${err.message}`;
      statusEl.dataset.state = 'reconnecting';
      statusEl.textContent = 'failed';
    }
  }

  // The export is fetched with the token, then saved: a plain link would
  // not carry it.
  async function exportRows() {
    const q = filterQuery();
    q.set('format', 'jsonl');
    try {
      const resp = await fetch(`/audit?${q}`, { headers: TG.authHeaders({}) });
      if (!resp.ok) {
        const out = await resp.json().catch(() => ({}));
        throw new Error(out.error || `HTTP ${resp.status}`);
      }
      const url = URL.createObjectURL(await resp.blob());
      const a = h('a', { href: url, download: 'tollgate-audit.jsonl', testid: 'export-link' });
      document.body.append(a);
      a.click();
      setTimeout(() => { URL.revokeObjectURL(url); a.remove(); }, 60000);
    } catch (err) {
      errorEl.textContent = `could not export the ledger: ${err.message}`;
    }
  }

  let filterTimer = null;
  const onFilter = () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      const q = filterQuery().toString();
      history.replaceState(null, '', q ? `?${q}` : location.pathname);
      load(false);
    }, filterDelay);
  };
  for (const el of filters) el.addEventListener(el.tagName === 'SELECT' ? 'change' : 'input', onFilter);
  document.getElementById('filters').addEventListener('submit', (e) => {
    e.preventDefault();
    load(false);
  });
  more.addEventListener('click', () => load(true));
  document.getElementById('export').addEventListener('click', exportRows);
  document.addEventListener('tollgate-token', () => load(false));

  load(false);
})();
