// The approvals inbox: every pending approval across all conversations,
// from GET /approvals, decided with POST /chat/approval.
//
// It stays current by polling GET /approvals every 2 seconds (and at once
// after a decision or a filter change), only while the page is visible.
// GET /approvals reads the audit ledger's index, so the list is the same
// from any API instance. The page shows the first pageSize approvals, and
// "Show more" another pageSize each; a poll asks for as many as are shown,
// with the ETag of the last answer, and an inbox where nothing changed
// hears 304 with no body: thousands waiting cost a poll what the shown
// rows cost, and nothing when they stay the same. Rows are kept by request
// id, so a reason being typed survives a refresh; a row's votes and who may
// decide it (a rule with deciders, a quorum or escalation steps) are
// updated in place.
'use strict';

(() => {
  const { h } = TG;
  const pollEvery = 2000;
  const filterDelay = 300;
  const pageSize = 100;
  const maxShown = 1000; // GET /approvals' largest page

  const list = document.getElementById('approvals');
  const empty = document.getElementById('inbox-empty');
  const count = document.getElementById('inbox-count');
  const statusEl = document.getElementById('inbox-status');
  const errorEl = document.getElementById('inbox-error');
  const convInput = document.getElementById('filter-conversation');
  const toolInput = document.getElementById('filter-tool');
  const principalInput = document.getElementById('filter-principal');
  const moreButton = document.getElementById('inbox-more');
  const rows = new Map(); // requestId → row element
  // polls counts the answers that changed the list and those that did not
  // (304), for the tests.
  const polls = { changed: 0, unchanged: 0 };
  window.tollgateInboxPolls = polls;
  const decidedList = document.getElementById('decided');
  const decidedHead = document.getElementById('decided-head');

  // The filters live in the address, so a filtered inbox can be shared.
  const params = new URLSearchParams(location.search);
  convInput.value = params.get('conversationId') || '';
  toolInput.value = params.get('tool') || '';
  principalInput.value = params.get('principal') || '';

  function filterQuery() {
    const q = new URLSearchParams();
    if (convInput.value.trim()) q.set('conversationId', convInput.value.trim());
    if (toolInput.value.trim()) q.set('tool', toolInput.value.trim());
    if (principalInput.value.trim()) q.set('principal', principalInput.value.trim());
    return q.toString();
  }

  function row(a) {
    const consoleLink = `/?conversation=${encodeURIComponent(a.conversationId)}&turn=${encodeURIComponent(a.turnId)}`;
    const el = h('article', {
      class: 'approval-row', testid: 'approval', 'data-request-id': a.requestId,
      'data-tool': a.toolName, 'data-conversation-id': a.conversationId,
    },
    h('div', { class: 'call-head' },
      h('span', { class: 'tool-name', testid: 'tool-name' }, a.toolName),
      h('span', { class: 'call-summary' }, TG.summary(a.toolName, a.arguments)),
      h('span', { class: 'times' }, TG.age(a.requestedAt), ' · ', TG.expiry(a.expiresAt))),
    h('div', { class: 'where' },
      a.subagent ? [h('span', { testid: 'subagent' }, `subagent ${a.subagent}`), ' · '] : [],
      'conversation ', h('a', { href: consoleLink, testid: 'open-in-console', title: 'open this turn in the console' }, a.conversationId),
      ' · ', h('code', {}, a.workflowId)),
    TG.votesView(a.deciders, a.votes),
    a.userMessage ? h('blockquote', { class: 'user-message', testid: 'user-message', title: 'the message that led to this call' }, a.userMessage) : null,
    h('details', { class: 'args', open: true }, h('summary', {}, 'arguments'), TG.argsView(a.arguments)),
    TG.previewView(a.preview) || TG.diffView(a.toolName, a.arguments),
    TG.decisionPanel({
      requestId: a.requestId,
      arguments: a.arguments,
      sandboxed: !!a.sandboxed,
      // A vote that leaves the call waiting: the row's votes change now,
      // not at the next poll.
      onVote: () => refresh(),
      onSent: (decision, accepted) => {
        el.classList.add(accepted ? `decided-${decision}` : 'not-accepted');
        // The row itself, not a lookup: a filter changed while the
        // decision was on its way has cleared the rows it listed.
        if (accepted) settle(a.requestId, `${decision === 'approve' ? 'approved' : 'declined'} here at ${new Date().toLocaleTimeString()}`, el);
        refresh();
      },
    }));
    return el;
  }

  // settle moves a row that no longer waits to the decided list, with what
  // became of it, so a decision does not just vanish while the page is
  // open. A row already settled keeps its first outcome.
  function settle(id, outcome, el = rows.get(id)) {
    if (!el || el.classList.contains('settled')) return;
    if (rows.get(id) === el) rows.delete(id);
    el.dataset.testid = 'decided-approval';
    el.classList.add('settled');
    for (const b of el.querySelectorAll('button, input, textarea')) b.disabled = true;
    for (const e of el.querySelectorAll('[data-expires-at]')) e.remove();
    el.prepend(h('div', { class: 'outcome', testid: 'outcome' }, outcome));
    decidedList.prepend(el);
    decidedHead.hidden = false;
  }

  // tellOutcome replaces a settled row's outcome with what the audit ledger
  // says became of its request: who decided what, and when. An API without
  // a ledger, or a row not in it yet, keeps the outcome it has.
  async function tellOutcome(id) {
    try {
      const resp = await fetch(`/audit?requestId=${encodeURIComponent(id)}`, { headers: TG.authHeaders({ Accept: 'application/json' }) });
      if (!resp.ok) return;
      const r = ((await resp.json()).records || [])[0];
      if (!r || !r.decision) return;
      const what = { approve: 'approved', decline: 'declined', timeout: 'no decision in time' }[r.decision] || r.decision;
      const by = r.principal ? ` by ${r.principal}` : r.decidedBy && r.decidedBy !== 'person' ? ` (${r.decidedBy})` : '';
      const when = r.decidedAt ? ` at ${new Date(r.decidedAt).toLocaleTimeString()}` : '';
      const el = decidedList.querySelector(`[data-request-id="${CSS.escape(id)}"] [data-testid="outcome"]`);
      if (el) el.textContent = `${what}${by}${when}${r.reason ? ` · “${r.reason}”` : ''}`;
    } catch {
      // The outcome already shown stands.
    }
  }

  // show makes the list match approvals (in their order), keeping the rows
  // that stay; a row that no longer waits was decided elsewhere (another
  // inbox, the console, the CLI, a grant, the clock).
  function show(approvals, total, more, q) {
    if (q !== shownQuery) {
      // A list under another filter: the rows it leaves out still wait.
      for (const el of rows.values()) el.remove();
      rows.clear();
      shownQuery = q;
    }
    const want = new Set(approvals.map((a) => a.requestId));
    for (const id of [...rows.keys()]) {
      if (!want.has(id)) {
        settle(id, `no longer waiting (decided elsewhere, or expired) · ${new Date().toLocaleTimeString()}`);
        tellOutcome(id);
      }
    }
    approvals.forEach((a, i) => {
      let el = rows.get(a.requestId);
      if (!el) {
        el = row(a);
        rows.set(a.requestId, el);
      } else {
        // Votes cast and escalation steps passed since: who may decide
        // it now.
        TG.votesText(el.querySelector('[data-testid="approval-votes"]'), a.deciders, a.votes);
      }
      if (list.children[i] !== el) list.insertBefore(el, list.children[i] || null);
    });
    empty.hidden = approvals.length > 0;
    count.textContent = more ? `${total} pending · showing ${approvals.length}` : `${total} pending`;
    moreButton.hidden = !more || shown >= maxShown;
    document.title = total ? `(${total}) tollgate inbox` : 'tollgate inbox';
    TG.tick();
  }

  // shownQuery is the filter the listed rows were fetched under; shown is
  // how many rows a poll asks for; etag is the last answer's, for its URL.
  let shownQuery = filterQuery();
  let shown = pageSize;
  let etag = { url: '', tag: '' };
  let generation = 0;
  let timer = null;

  // refresh asks GET /approvals now and schedules the next poll. A slower
  // answer to an older filter is dropped.
  async function refresh() {
    clearTimeout(timer);
    const gen = ++generation;
    const q = filterQuery();
    const url = `/approvals?${q ? `${q}&` : ''}limit=${shown}`;
    try {
      const headers = { Accept: 'application/json' };
      if (etag.url === url && etag.tag && q === shownQuery) headers['If-None-Match'] = etag.tag;
      const resp = await fetch(url, { headers: TG.authHeaders(headers), cache: 'no-store' });
      if (gen !== generation) return;
      if (resp.status === 304) {
        // Nothing changed since the last answer: the list stands.
        polls.unchanged++;
        errorEl.textContent = '';
        statusEl.dataset.state = 'live';
        statusEl.textContent = `updated ${new Date().toLocaleTimeString()}`;
        schedule();
        return;
      }
      const out = await resp.json().catch(() => ({}));
      if (gen !== generation) return;
      if (!resp.ok) throw new Error(out.error || `HTTP ${resp.status}`);
      polls.changed++;
      etag = { url, tag: resp.headers.get('ETag') || '' };
      errorEl.textContent = '';
      const approvals = out.approvals || [];
      show(approvals, out.total ?? approvals.length, Boolean(out.nextPageToken), q);
      statusEl.dataset.state = 'live';
      statusEl.textContent = `updated ${new Date().toLocaleTimeString()}`;
    } catch (err) {
      if (gen !== generation) return;
      errorEl.textContent = `could not load approvals: ${err.message}`;
      statusEl.dataset.state = 'reconnecting';
      statusEl.textContent = 'retrying';
    }
    if (gen === generation) schedule();
  }

  function schedule() {
    clearTimeout(timer);
    if (document.visibilityState !== 'hidden') timer = setTimeout(refresh, pollEvery);
  }

  document.addEventListener('visibilitychange', () => {
    if (document.visibilityState === 'visible') refresh();
    else clearTimeout(timer);
  });

  let filterTimer = null;
  const onFilter = () => {
    clearTimeout(filterTimer);
    filterTimer = setTimeout(() => {
      shown = pageSize;
      const q = filterQuery();
      history.replaceState(null, '', q ? `?${q}` : location.pathname);
      refresh();
    }, filterDelay);
  };
  convInput.addEventListener('input', onFilter);
  toolInput.addEventListener('input', onFilter);
  principalInput.addEventListener('input', onFilter);
  moreButton.addEventListener('click', () => {
    shown = Math.min(shown + pageSize, maxShown);
    refresh();
  });
  document.getElementById('filters').addEventListener('submit', (e) => {
    e.preventDefault();
    refresh();
  });

  document.addEventListener('tollgate-token', refresh);

  TG.startClock();
  refresh();
})();
