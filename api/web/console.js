// The web console: starts or continues a conversation with POST
// /chat/stream, renders each turn's events as they stream in, and decides
// approvals with POST /chat/approval (several of a turn at once with POST
// /chat/approvals).
//
// Reconnection and no event twice:
//   - Every numbered event has a seq, per turn, from 1, without gaps. A turn
//     view keeps the last seq it rendered and drops any event at or below it;
//     an event past lastSeq+1 (a gap, which the API never sends) makes it
//     reconnect after lastSeq.
//   - A stream that ends before `finish` (dropped connection, API restart)
//     is resumed with GET /chat/turns/{turnId}/events?after=lastSeq, with
//     backoff, for as long as the turn has not finished.
//   - localStorage keeps the conversation id and its recent turns (turnId,
//     query), written when a turn is added; at load they are merged with
//     the turns the API lists for the conversation (GET
//     /conversations/{id}/turns), which knows those started elsewhere. A reload rebuilds every kept turn from
//     scratch: a fresh view with lastSeq 0 streams ?after=0, which for an
//     unfinished turn then simply goes on live. The server's log is the only
//     source of truth, so nothing can be rendered twice.
'use strict';

(() => {
  const { h } = TG;
  const storeKey = 'tollgate.console.v1';
  const keptTurns = 10;
  const maxBackoff = 10000;
  const maxAttempts = 8;

  // ---- storage ---------------------------------------------------------

  function load() {
    try {
      const s = JSON.parse(localStorage.getItem(storeKey));
      if (s && Array.isArray(s.turns)) return s;
    } catch {
      // a broken entry starts afresh
    }
    return { conversationId: null, turns: [] };
  }

  const state = load();

  function save() {
    state.turns = state.turns.slice(-keptTurns);
    try {
      localStorage.setItem(storeKey, JSON.stringify(state));
    } catch {
      // storage full or denied: the console works, it just forgets on reload
    }
  }

  // ---- connection indicator -------------------------------------------

  const conn = document.getElementById('connection');
  let reconnects = 0;
  const live = new Set();

  function showConnection() {
    const retrying = [...views.values()].some((v) => v.retrying);
    const stateName = retrying ? 'reconnecting' : live.size > 0 ? 'live' : 'idle';
    conn.dataset.state = stateName;
    conn.dataset.reconnects = String(reconnects);
    conn.textContent = stateName === 'live' ? `live · ${live.size} stream${live.size === 1 ? '' : 's'}` : stateName;
  }

  // ---- SSE over fetch ---------------------------------------------------

  // readSSE reads a text/event-stream body and calls onMessage({id, data})
  // per message; id is null for messages without an id line (keep-alives,
  // the API's own errors). It returns when the body ends.
  async function readSSE(body, onMessage) {
    const reader = body.pipeThrough(new TextDecoderStream()).getReader();
    let buf = '';
    let id = null;
    let data = [];
    const line = (l) => {
      if (l === '') {
        if (data.length > 0) onMessage({ id, data: data.join('\n') });
        id = null;
        data = [];
        return;
      }
      if (l.startsWith(':')) return;
      const i = l.indexOf(':');
      const field = i < 0 ? l : l.slice(0, i);
      let value = i < 0 ? '' : l.slice(i + 1);
      if (value.startsWith(' ')) value = value.slice(1);
      if (field === 'id') id = value;
      else if (field === 'data') data.push(value);
    };
    for (;;) {
      const { value, done } = await reader.read();
      if (done) return;
      buf += value;
      for (;;) {
        const m = /\r\n|\n|\r/.exec(buf);
        // A lone \r at the end may be the first half of \r\n.
        if (!m || (m[0] === '\r' && m.index === buf.length - 1)) break;
        line(buf.slice(0, m.index));
        buf = buf.slice(m.index + m[0].length);
      }
    }
  }

  // ---- a turn -----------------------------------------------------------

  const turnsEl = document.getElementById('turns');
  const views = new Map(); // turnId → TurnView

  // A scope is where events of the turn itself, or of one subagent, go.
  // Its open requests (request id → panel, in the order asked) are what
  // its batch bar decides at once.
  function newScope(container) {
    return { container, cards: new Map(), answer: null, open: new Map(), batch: null };
  }

  class TurnView {
    constructor(rec) {
      this.rec = rec;
      this.lastSeq = 0;
      this.finished = false;
      this.retrying = false;
      this.attempt = 0;
      this.subs = new Map(); // subagent name → scope
      this.statusEl = h('span', { class: 'turn-status', testid: 'turn-status', 'data-state': 'connecting' }, 'connecting');
      this.timeline = h('div', { class: 'timeline' });
      this.root = newScope(this.timeline);
      this.msgEl = h('div', { class: 'user-msg', testid: 'user-message' }, rec.query || '(a message sent elsewhere)');
      this.el = h('section', { class: 'turn', testid: 'turn', 'data-turn-id': rec.turnId },
        h('div', { class: 'turn-head' },
          this.msgEl,
          h('div', { class: 'turn-meta' }, h('code', { class: 'turn-id' }, rec.turnId), this.statusEl)),
        this.timeline);
      turnsEl.append(this.el);
    }

    // setQuery shows the user's message, once the API has said it.
    setQuery(query) {
      if (!query || this.rec.query) return;
      this.rec.query = query;
      this.msgEl.textContent = query;
    }

    setStatus(s, text) {
      this.statusEl.dataset.state = s;
      this.statusEl.textContent = text || s;
    }

    // watch streams the turn until its finish, resuming after lastSeq each
    // time the stream ends early. first is the POST /chat/stream response.
    async watch(first) {
      if (this.watching) return;
      this.watching = true;
      let resp = first;
      while (!this.finished && !this.stopped) {
        const ctrl = new AbortController();
        this.abort = () => ctrl.abort();
        try {
          if (!resp) {
            resp = await fetch(`/chat/turns/${encodeURIComponent(this.rec.turnId)}/events?after=${this.lastSeq}`, {
              signal: ctrl.signal,
              headers: TG.authHeaders({ Accept: 'text/event-stream' }),
            });
          }
          if (!resp.ok) {
            const out = await resp.json().catch(() => ({}));
            throw new Error(out.error || `HTTP ${resp.status}`);
          }
          live.add(this);
          this.retrying = false;
          if (!this.finished) this.updateStatus({ type: '' });
          showConnection();
          await readSSE(resp.body, (m) => this.onMessage(m));
        } catch (err) {
          if (!ctrl.signal.aborted) this.note(`connection lost: ${err.message}`);
        } finally {
          live.delete(this);
          resp = null;
        }
        if (this.finished || this.stopped) break;
        if (this.attempt >= maxAttempts) {
          this.giveUp();
          break;
        }
        this.retrying = true;
        reconnects++;
        const wait = Math.min(maxBackoff, 250 * 2 ** this.attempt++);
        this.setStatus('reconnecting', `reconnecting after #${this.lastSeq}…`);
        showConnection();
        await new Promise((r) => setTimeout(r, wait));
      }
      this.retrying = false;
      this.watching = false;
      showConnection();
    }

    // giveUp stops retrying a turn that has made no progress for a while
    // (say, one that Temporal no longer keeps) and offers to try again.
    giveUp() {
      this.setStatus('disconnected');
      const retry = h('button', { type: 'button', class: 'secondary', testid: 'reconnect' }, 'Reconnect');
      const el = h('div', { class: 'note' }, `no progress after ${maxAttempts} tries `, retry);
      retry.addEventListener('click', () => {
        el.remove();
        this.attempt = 0;
        this.watch();
      });
      this.timeline.append(el);
    }

    onMessage(m) {
      let ev;
      try {
        ev = JSON.parse(m.data);
      } catch {
        return;
      }
      if (m.id === null || m.id === '') {
        // Keep-alives, the API's own errors and its queued notice are not
        // part of the log.
        if (ev.type === 'error') this.note(ev.message || 'error');
        if (ev.type === 'queued') this.note('queued: this message waits for the conversation\'s running turn to end');
        if (ev.type === 'gate_frozen' || ev.type === 'gate_thawed') {
          showGate({ frozen: ev.type === 'gate_frozen', by: ev.by, reason: ev.reason, blockNewTurns: ev.blockNewTurns });
        }
        return;
      }
      const seq = Number(m.id);
      if (!(seq > this.lastSeq)) return; // seen already
      if (seq !== this.lastSeq + 1) {
        // A gap: ask again from what we have.
        if (this.abort) this.abort();
        return;
      }
      this.lastSeq = seq;
      this.attempt = 0;
      this.lastNote = null;
      ev.seq = seq;
      try {
        this.render(ev);
      } catch (err) {
        console.error('render event', ev, err);
      }
      if (ev.type === 'finish') this.finished = true;
    }

    // note shows something about the connection (not a turn event).
    // Repeats of the same note while reconnecting are shown once.
    note(text) {
      if (text === this.lastNote) return;
      this.lastNote = text;
      this.timeline.append(h('div', { class: 'note', testid: 'note' }, text));
    }

    scopeFor(ev) {
      if (!ev.type.startsWith('subagent_')) return this.root;
      let scope = this.subs.get(ev.name);
      if (ev.type === 'subagent_start' || !scope) {
        scope = this.openSubagent(ev.name);
        this.subs.set(ev.name, scope);
      }
      return scope;
    }

    // openSubagent nests a subagent under the first Task call for it that
    // has neither a subagent nor a result yet (Task calls run in order).
    openSubagent(name) {
      const card = [...this.el.querySelectorAll('.call[data-tool="Task"]')].find(
        (c) => c.dataset.subagent === name && !('subBound' in c.dataset) && !('hasResult' in c.dataset));
      const box = h('div', { class: 'subagent', testid: 'subagent', 'data-name': name },
        h('div', { class: 'subagent-head' }, 'subagent ', h('strong', {}, name)));
      if (card) {
        card.dataset.subBound = '';
        card.querySelector(':scope > .subagent-slot').append(box);
      } else {
        this.timeline.append(box);
      }
      return newScope(box);
    }

    render(ev) {
      const scope = this.scopeFor(ev);
      const type = ev.type.startsWith('subagent_') ? ev.type.slice('subagent_'.length) : ev.type;
      const el = this.renderIn(scope, type, ev);
      el.classList.add('event');
      if (!el.dataset.testid) el.dataset.testid = 'event';
      el.dataset.seq = String(ev.seq);
      el.dataset.type = ev.type;
      if (type !== 'token') scope.answer = null;
      if (ev.type === 'subagent_finish') this.subs.delete(ev.name);
      this.updateStatus(ev);
      followBottom();
    }

    updateStatus(ev) {
      switch (ev.type) {
        case 'finish':
          this.setStatus(`finished-${ev.reason || 'stop'}`, `finished · ${ev.reason || 'stop'}`);
          break;
        case 'approval_request':
        case 'subagent_approval_request':
          this.setStatus('waiting', 'waiting for approval');
          break;
        default:
          if (this.el.querySelector('.decision-panel:not([data-closed])')) this.setStatus('waiting', 'waiting for approval');
          else this.setStatus('running');
      }
    }

    renderIn(scope, type, ev) {
      const sub = ev.type.startsWith('subagent_');
      switch (type) {
        case 'turn_start':
        case 'start': {
          // The turn's id is in its header; a subagent's workflow is new.
          const el = h('div', { class: 'meta' },
            sub ? `subagent ${ev.name} started · workflow ` : 'turn started',
            sub && ev.workflowId ? h('code', {}, ev.workflowId) : null);
          scope.container.append(el);
          return el;
        }
        case 'token': {
          if (!scope.answer || scope.answer !== scope.container.lastElementChild) {
            scope.answer = h('div', { class: 'answer', testid: 'answer' });
            scope.container.append(scope.answer);
          }
          // A reset token starts the answer again (a retried model call
          // answered otherwise): the text before it stays, struck through.
          if (ev.reset) {
            for (const t of scope.answer.querySelectorAll('.token:not(.void)')) {
              t.classList.add('void');
              t.title = 'voided: the model call was retried and answered otherwise';
            }
          }
          const el = h('span', { class: 'token' }, ev.data || '');
          scope.answer.append(el);
          return el;
        }
        case 'tool_call': {
          const el = h('div', { class: 'calls' });
          for (const call of ev.toolCalls || []) el.append(this.card(scope, call));
          scope.container.append(el);
          return el;
        }
        case 'approval_request':
          return this.approvalRequest(scope, ev);
        case 'approval_decision':
          return this.approvalDecision(scope, ev);
        case 'approval_vote':
        case 'approval_escalated':
          return this.approvalProgress(scope, ev);
        case 'tool_result':
          return this.toolResult(scope, ev);
        case 'client_tool_call': {
          // A tool the client that started the turn runs itself.
          const el = h('div', { class: 'meta client-call', testid: 'client-tool-call' },
            `waiting for the client that started this turn to run ${ev.toolName} · `, TG.expiry(ev.expiresAt));
          const card = scope.cards.get(ev.toolCallId);
          if (card) {
            card.querySelector(':scope > .approval-slot').append(el);
            this.setCardStatus(card, 'waiting', 'client runs it');
          } else {
            scope.container.append(el);
          }
          return el;
        }
        case 'heartbeat': {
          // Published with approval requests: the batch waits for them, so
          // its other calls have not run either.
          for (const card of scope.cards.values()) {
            const badge = card.querySelector(':scope > .call-head > .badge');
            if (badge && badge.dataset.status === 'called') this.setCardStatus(card, 'waiting', 'waiting for the batch');
          }
          const el = h('span', { class: 'heartbeat', hidden: true });
          scope.container.append(el);
          return el;
        }
        case 'finish': {
          const reason = ev.reason || 'stop';
          const el = h('div', { class: `finish reason-${reason}`, testid: sub ? 'subagent-finish' : 'finish', 'data-reason': reason },
            sub ? `subagent ${ev.name} finished · ${reason}` : `finished · ${reason}`,
            ev.message ? ` — ${ev.message}` : null);
          scope.container.append(el);
          return el;
        }
        case 'context_compacted': {
          const what = [];
          if (ev.elided) what.push(`${ev.elided} old tool output${ev.elided === 1 ? '' : 's'} left out`);
          if (ev.summarized) what.push(`${ev.summarized} earlier message${ev.summarized === 1 ? '' : 's'} summarized`);
          if (ev.kept && ev.summarized) what.push(`${ev.kept} newer kept whole`);
          if (ev.cut) what.push(`${ev.cut} long message${ev.cut === 1 ? '' : 's'} cut in the middle`);
          const kib = (n) => Math.round((n || 0) / 1024);
          const el = h('div', { class: 'compacted', testid: 'context-compacted' },
            `context compacted to fit the model: ${what.join(', ')} (${kib(ev.bytesBefore)} → ${kib(ev.bytesAfter)} KiB); the whole conversation is kept`);
          scope.container.append(el);
          return el;
        }
        case 'error': {
          const el = h('div', { class: 'error', testid: 'error' }, ev.message || 'error');
          scope.container.append(el);
          return el;
        }
        default: {
          const el = h('pre', { class: 'json unknown' }, JSON.stringify(ev, null, 2));
          scope.container.append(el);
          return el;
        }
      }
    }

    // card is one tool call: its name and gist, arguments, the diff of a
    // Write or Edit, and slots for its approval, result and subagent.
    card(scope, call) {
      const args = TG.parseObject(call.arguments) || {};
      const badge = h('span', { class: 'badge', testid: 'call-status', 'data-status': 'called' }, 'called');
      const el = h('div', {
        class: 'call', testid: 'tool-call', 'data-call-id': call.id, 'data-tool': call.name,
        'data-subagent': call.name === 'Task' ? args.subagent_type || '' : null,
      },
      h('div', { class: 'call-head' },
        h('span', { class: 'tool-name', testid: 'tool-name' }, call.name),
        h('span', { class: 'call-summary' }, TG.summary(call.name, call.arguments)),
        badge),
      h('details', { class: 'args', open: true }, h('summary', {}, 'arguments'), TG.argsView(call.arguments)),
      TG.diffView(call.name, call.arguments),
      h('div', { class: 'approval-slot' }),
      h('div', { class: 'result-slot' }),
      call.name === 'Task' ? h('div', { class: 'subagent-slot' }) : null);
      scope.cards.set(call.id, el);
      return el;
    }

    setCardStatus(card, status, text) {
      const b = card.querySelector(':scope > .call-head > .badge');
      b.dataset.status = status;
      b.textContent = text || status;
    }

    approvalRequest(scope, ev) {
      const sandboxed = !!(ev.sandbox && !ev.sandbox.unavailable);
      const panel = TG.decisionPanel({ requestId: ev.requestId, arguments: ev.arguments, sandboxed });
      const budget = ev.kind === 'budget';
      const el = h('div', { class: budget ? 'approval budget' : 'approval', testid: 'approval-request', 'data-request-id': ev.requestId, 'data-tool': ev.toolName, 'data-kind': ev.kind || null },
        budget
          ? h('div', { class: 'approval-head' }, h('strong', {}, 'Budget spent'), ': ', ev.reason || '', ' · ', TG.expiry(ev.expiresAt))
          : h('div', { class: 'approval-head' }, 'Approval needed for ', h('strong', {}, ev.toolName), ' · ', TG.expiry(ev.expiresAt)),
        budget ? null : (sandboxed ? TG.sandboxView(ev.sandbox) : TG.previewView(ev.preview)),
        ev.votes || ev.deciders ? TG.votesView(ev.deciders, ev.votes) : null,
        panel);
      const card = scope.cards.get(ev.toolCallId);
      if (card) {
        // The worker's preview, read where the files are, says what the
        // call does: the card's own diff of the arguments would be a
        // second, different story (a Write that overwrites, say).
        if (ev.preview) card.querySelector(':scope > [data-testid="diff"]')?.remove();
        card.querySelector(':scope > .approval-slot').append(el);
        card.classList.add('needs-approval');
        this.setCardStatus(card, 'waiting', 'waiting for approval');
      } else {
        el.prepend(h('div', { class: 'call-head' }, h('span', { class: 'tool-name' }, ev.toolName), TG.argsView(ev.arguments)));
        scope.container.append(el);
      }
      if (!budget) {
        scope.open.set(ev.requestId, panel);
        this.showBatch(scope);
      }
      return el;
    }

    // showBatch shows the scope's "Approve all" bar while two or more of
    // its calls wait, after them. A subagent's calls are its scope's: they
    // wait in another workflow, which one POST cannot decide with these.
    showBatch(scope) {
      if (!scope.batch) {
        if (scope.open.size < 2) return;
        scope.batch = TG.batchPanel({ requestIds: () => [...scope.open.keys()] });
        scope.container.append(scope.batch);
      }
      scope.batch.show(scope.open.size);
    }

    // approvalProgress shows a vote on a waiting call, or an escalation
    // step it passed: a line under its request, and the request's votes
    // and deciders as they stand now.
    approvalProgress(scope, ev) {
      const req = this.el.querySelector(`.approval[data-request-id="${CSS.escape(ev.requestId || '')}"]`);
      const line = ev.type.endsWith('approval_vote')
        ? `${ev.by} ${ev.decision === 'approve' ? 'approved' : 'declined'}${ev.reason ? `: ${ev.reason}` : ''}`
        : `no decision yet: escalated to ${(ev.escalated || []).join(', ')}`;
      const el = h('div', { class: 'meta', testid: ev.type.endsWith('approval_vote') ? 'approval-vote' : 'approval-escalated' }, line);
      if (!req) {
        scope.container.append(el);
        return el;
      }
      let view = req.querySelector('[data-testid="approval-votes"]');
      if (!view) {
        view = TG.votesView(null, null);
        req.querySelector('.decision-panel')?.before(view);
      }
      const deciders = ev.deciders || (view.dataset.deciders ? view.dataset.deciders.split(',') : null);
      TG.votesText(view, deciders, ev.votes);
      const panel = req.querySelector('.decision-panel');
      if (panel) panel.before(el);
      else req.append(el);
      return el;
    }

    approvalDecision(scope, ev) {
      const d = ev.decision || 'decline';
      const text = { approve: 'approved', decline: 'declined', timeout: 'no decision in time' }[d] || d;
      const el = h('div', { class: `decision decision-${d}`, testid: 'approval-decision', 'data-decision': d },
        h('span', { class: 'badge', 'data-status': d }, text),
        ev.reason ? h('span', { class: 'reason-text', testid: 'decision-reason' }, ev.reason) : null,
        ev.grant ? h('span', { class: 'meta', testid: 'grant' }, `by a remembered decision: ${ev.grant}`,
          ev.grantUsesLeft !== undefined ? ` · ${ev.grantUsesLeft} ${ev.grantUsesLeft === 1 ? 'use' : 'uses'} left` : '',
          ev.grantExpiresAt ? ` · ends ${new Date(ev.grantExpiresAt).toLocaleString()}` : '') : null);
      const req = this.el.querySelector(`.approval[data-request-id="${CSS.escape(ev.requestId || '')}"]`);
      const card = scope.cards.get(ev.toolCallId);
      if (scope.open.delete(ev.requestId)) this.showBatch(scope);
      if (req) {
        const panel = req.querySelector('.decision-panel');
        if (panel) {
          panel.dataset.closed = '';
          panel.hidden = true;
        }
        req.classList.add('decided');
        req.querySelector('.approval-head').replaceChildren('Approval of ', h('strong', {}, req.dataset.tool || 'this call'), ':');
        req.append(el);
      } else if (card) {
        card.querySelector(':scope > .approval-slot').append(el);
      } else {
        scope.container.append(el);
      }
      if (card) {
        card.classList.remove('needs-approval');
        this.setCardStatus(card, d === 'approve' ? 'approved' : d, text);
      }
      return el;
    }

    toolResult(scope, ev) {
      const results = ev.toolResults || [];
      const el = h('div', { class: 'results-line' }, 'results: ',
        results.map((r, i) => [i ? ' · ' : '', r.name, ' ', h('span', { class: 'badge', 'data-status': r.status }, r.status)]));
      for (const r of results) {
        const card = scope.cards.get(r.id);
        const res = h('div', { class: `result status-${r.status}`, testid: 'tool-result', 'data-status': r.status },
          h('span', { class: 'badge', 'data-status': r.status }, r.status),
          h('pre', { class: 'result-text', testid: 'result-text' }, r.result || ''));
        if (card) {
          card.dataset.hasResult = '';
          for (const e of card.querySelectorAll(':scope > .approval-slot .client-call [data-expires-at]')) e.remove();
          card.querySelector(':scope > .result-slot').append(res);
          // A declined call that was never asked about was not declined by
          // anyone: the turn stopped (a new message, a cancel) before it ran.
          const decided = card.querySelector(':scope > .approval-slot [data-testid="approval-request"], :scope > .approval-slot [data-testid="approval-decision"], :scope > .approval-slot .client-call');
          if (r.status === 'declined' && !decided) {
            this.setCardStatus(card, 'declined', 'not run: the turn stopped');
          } else {
            this.setCardStatus(card, r.status);
          }
        } else {
          el.append(res);
        }
      }
      scope.container.append(el);
      return el;
    }
  }

  // followBottom keeps the newest event in view while the reader is at the
  // bottom of the page, and leaves them alone when they scrolled up.
  let atBottom = true;
  window.addEventListener('scroll', () => {
    atBottom = window.innerHeight + window.scrollY >= document.body.scrollHeight - 80;
  }, { passive: true });
  function followBottom() {
    if (atBottom) window.scrollTo(0, document.body.scrollHeight);
  }

  // ---- conversation and composer -----------------------------------------

  const convEl = document.getElementById('conversation-id');
  const form = document.getElementById('composer');
  const query = document.getElementById('query');
  const sendBtn = document.getElementById('send');
  const formError = document.getElementById('composer-error');

  const compactBtn = document.getElementById('compact');
  const compactInstructions = document.getElementById('compact-instructions');
  const compactStatus = document.getElementById('compact-status');

  function showConversation() {
    convEl.textContent = state.conversationId || 'new';
    convEl.dataset.conversationId = state.conversationId || '';
    compactBtn.disabled = !state.conversationId;
  }

  // compact asks the conversation to summarize its earlier messages now
  // (POST /conversations/{id}/compact), with the instructions typed beside
  // the button; the next turn says what it reads (context_compacted).
  async function compact() {
    if (!state.conversationId) return;
    compactBtn.disabled = true;
    compactStatus.dataset.state = 'compacting';
    compactStatus.textContent = 'compacting…';
    try {
      const resp = await fetch(`/conversations/${encodeURIComponent(state.conversationId)}/compact`, {
        method: 'POST',
        headers: TG.authHeaders({ 'Content-Type': 'application/json' }),
        body: JSON.stringify({ instructions: compactInstructions.value.trim() }),
      });
      const out = await resp.json().catch(() => ({}));
      if (!resp.ok) {
        compactStatus.dataset.state = 'error';
        compactStatus.textContent = out.error || `HTTP ${resp.status}`;
        return;
      }
      compactStatus.dataset.state = out.compacted ? 'compacted' : out.queued ? 'queued' : 'unchanged';
      compactStatus.textContent = out.queued
        ? 'compacts when the running turn ends'
        : out.compacted
          ? `summarized ${out.summarized} messages, ${out.kept} kept whole`
          : out.reason;
      compactInstructions.value = '';
    } catch (err) {
      compactStatus.dataset.state = 'error';
      compactStatus.textContent = `could not reach the API: ${err.message}`;
    } finally {
      compactBtn.disabled = !state.conversationId;
    }
  }
  compactBtn.addEventListener('click', compact);

  function open(rec, first) {
    let view = views.get(rec.turnId);
    if (view) return view;
    view = new TurnView(rec);
    views.set(rec.turnId, view);
    view.watch(first);
    return view;
  }

  async function send(text) {
    const body = { query: text };
    if (state.conversationId) body.conversationId = state.conversationId;
    formError.textContent = '';
    sendBtn.disabled = true;
    let resp;
    try {
      resp = await fetch('/chat/stream', {
        method: 'POST',
        headers: TG.authHeaders({ 'Content-Type': 'application/json', Accept: 'text/event-stream' }),
        body: JSON.stringify(body),
      });
    } catch (err) {
      formError.textContent = `could not reach the API: ${err.message}`;
      sendBtn.disabled = false;
      return;
    }
    sendBtn.disabled = false;
    if (!resp.ok) {
      const out = await resp.json().catch(() => ({}));
      formError.textContent = out.error || `HTTP ${resp.status}`;
      return;
    }
    const rec = {
      turnId: resp.headers.get('X-Tollgate-Turn-Id'),
      query: text,
    };
    state.conversationId = resp.headers.get('X-Tollgate-Conversation-Id') || state.conversationId;
    state.turns.push(rec);
    save();
    showConversation();
    query.value = '';
    atBottom = true;
    open(rec, resp);
  }

  // Sending while calls wait for a decision declines them (the turn is
  // interrupted: the model hears the user sent a new message), so the
  // console asks first.
  const confirmBox = document.getElementById('composer-confirm');
  const confirmText = document.getElementById('confirm-text');
  function waitingCalls() {
    return turnsEl.querySelectorAll('.decision-panel:not([data-closed])').length;
  }
  form.addEventListener('submit', (e) => {
    e.preventDefault();
    const text = query.value.trim();
    if (!text) return;
    const n = waitingCalls();
    if (n > 0) {
      confirmText.textContent = `${n} ${n === 1 ? 'call waits' : 'calls wait'} for your decision. Sending now declines ${n === 1 ? 'it' : 'them'}: the agent is told you sent a new message.`;
      confirmBox.hidden = false;
      document.getElementById('confirm-send').focus();
      return;
    }
    send(text);
  });
  document.getElementById('confirm-send').addEventListener('click', () => {
    confirmBox.hidden = true;
    const text = query.value.trim();
    if (text) send(text);
  });
  document.getElementById('confirm-cancel').addEventListener('click', () => {
    confirmBox.hidden = true;
    query.focus();
  });
  query.addEventListener('keydown', (e) => {
    if (e.key === 'Enter' && (e.ctrlKey || e.metaKey)) {
      e.preventDefault();
      form.requestSubmit();
    }
  });
  // switchTo leaves the conversation shown for conv (null: a new one).
  function switchTo(conv) {
    for (const v of views.values()) {
      v.stopped = true; // ends its reconnect loop
      if (v.abort) v.abort();
    }
    views.clear();
    turnsEl.replaceChildren();
    state.conversationId = conv;
    state.turns = [];
    save();
    showConversation();
    showConnection();
    if (conv) openConversation(conv);
    showElsewhere();
    query.focus();
  }
  document.getElementById('new-conversation').addEventListener('click', () => switchTo(null));

  // ---- what the API knows of a conversation ------------------------------

  // listedTurns asks the API for the conversation's last turns, each with
  // the start of its message ({turnId, query}), or returns null when it
  // cannot say (a token without the role, the network).
  async function listedTurns(conv) {
    try {
      const resp = await fetch(`/conversations/${encodeURIComponent(conv)}/turns?limit=${keptTurns}`,
        { headers: TG.authHeaders({ Accept: 'application/json' }) });
      if (!resp.ok) return null;
      return ((await resp.json()).turns || []).map((t) => ({ turnId: t.turnId, query: t.message || '' }));
    } catch {
      return null;
    }
  }

  // openConversation shows every turn of conv the API lists, wherever it
  // was started (curl, the terminal client, another browser), with its
  // message and, streamed from the start, its waiting calls; then the
  // turns kept here that it does not list (yet).
  async function openConversation(conv) {
    const listed = await listedTurns(conv);
    if (state.conversationId !== conv) return; // left meanwhile
    if (listed) {
      const kept = new Map(state.turns.map((r) => [r.turnId, r]));
      const turns = listed.map((r) => ({ turnId: r.turnId, query: r.query || kept.get(r.turnId)?.query || '' }));
      for (const r of state.turns) if (!turns.some((t) => t.turnId === r.turnId)) turns.push(r);
      state.turns = turns;
      save();
    }
    for (const rec of state.turns) {
      const view = views.get(rec.turnId);
      if (view) view.setQuery(rec.query);
      else open(rec);
    }
    for (const rec of state.turns) turnsEl.append(views.get(rec.turnId).el); // in the conversation's order
  }

  // showElsewhere lists the calls that wait for a decision in other
  // conversations, each conversation with a button that opens it here. A
  // token that may not list approvals shows nothing.
  // It reads the first page of GET /approvals (the soonest to expire), and
  // sends the last answer's ETag: an unchanged inbox is a 304 and nothing
  // is drawn again.
  const elsewhereEl = document.getElementById('elsewhere');
  const elsewhereEvery = 5000;
  const elsewhereLimit = 100;
  let elsewhere = { tag: '', approvals: [], conv: null };
  async function showElsewhere() {
    let approvals;
    try {
      const headers = { Accept: 'application/json' };
      if (elsewhere.tag) headers['If-None-Match'] = elsewhere.tag;
      const resp = await fetch(`/approvals?limit=${elsewhereLimit}`, { headers: TG.authHeaders(headers), cache: 'no-store' });
      if (resp.status === 304) {
        if (elsewhere.conv === state.conversationId) return;
        approvals = elsewhere.approvals;
      } else {
        if (!resp.ok) throw new Error(`HTTP ${resp.status}`);
        approvals = (await resp.json()).approvals || [];
        elsewhere = { tag: resp.headers.get('ETag') || '', approvals, conv: null };
      }
    } catch {
      elsewhere = { tag: '', approvals: [], conv: null };
      elsewhereEl.hidden = true;
      return;
    }
    elsewhere.conv = state.conversationId;
    const byConv = new Map();
    for (const a of approvals) {
      if (a.conversationId === state.conversationId) continue;
      if (!byConv.has(a.conversationId)) byConv.set(a.conversationId, []);
      byConv.get(a.conversationId).push(a);
    }
    const n = [...byConv.values()].reduce((sum, list) => sum + list.length, 0);
    elsewhereEl.hidden = n === 0;
    elsewhereEl.replaceChildren(
      h('div', { class: 'elsewhere-head' }, `${n} ${n === 1 ? 'call waits' : 'calls wait'} for a decision in ${byConv.size === 1 ? 'another conversation' : `${byConv.size} other conversations`}`),
      h('ul', {}, [...byConv].map(([conv, list]) => h('li', { testid: 'elsewhere-conversation', 'data-conversation-id': conv },
        h('button', { type: 'button', class: 'secondary', testid: 'open-conversation', onclick: () => switchTo(conv) }, 'Open'), ' ',
        h('code', {}, conv), ' · ', list.map((a) => a.toolName).join(', '),
        list[0].userMessage ? h('span', { class: 'elsewhere-msg' }, ` · “${list[0].userMessage}”`) : null))));
  }
  setInterval(() => {
    if (document.visibilityState !== 'hidden') showElsewhere();
  }, elsewhereEvery);
  document.addEventListener('tollgate-token', showElsewhere);

  // ---- start -------------------------------------------------------------

  // /?turn=<turnId>&conversation=<id> (the inbox links here) opens that
  // turn, in its conversation.
  const params = new URLSearchParams(location.search);
  const wanted = params.get('turn');
  if (wanted) {
    const conv = params.get('conversation');
    if (conv && conv !== state.conversationId) {
      state.conversationId = conv;
      state.turns = [];
    }
    if (!state.turns.some((t) => t.turnId === wanted)) {
      state.turns.push({ turnId: wanted, query: '' });
    }
    save();
    history.replaceState(null, '', location.pathname);
  }

  // ---- the gate's freeze -------------------------------------------------

  // showGate shows the freeze f (GateFreeze, or what a gate_frozen or
  // gate_thawed event says): a banner while frozen, and the button that
  // changes it.
  function showGate(f) {
    const banner = document.getElementById('gate-banner');
    banner.hidden = !f.frozen;
    banner.textContent = f.frozen
      ? `Frozen by ${f.by || 'an admin'}${f.reason ? `: ${f.reason}` : ''} — every protected call asks${f.blockNewTurns ? '; no new turns start' : ''}`
      : '';
    document.getElementById('freeze').hidden = !!f.frozen;
    document.getElementById('freeze-block').parentElement.hidden = !!f.frozen;
    document.getElementById('freeze-reason').hidden = !!f.frozen;
    document.getElementById('thaw').hidden = !f.frozen;
  }

  // loadGate reads the freeze (GET /admin/freeze); a caller who may not
  // read it sees no banner.
  async function loadGate() {
    try {
      const resp = await fetch('/admin/freeze', { headers: TG.authHeaders({ Accept: 'application/json' }), cache: 'no-store' });
      if (resp.ok) showGate(await resp.json());
    } catch {
      // No banner: the API is unreachable, the console says so elsewhere.
    }
  }

  // changeGate freezes or thaws the gate (POST /admin/freeze, /admin/thaw:
  // an admin's token) and shows the answer, or why not.
  async function changeGate(path, body) {
    const err = document.getElementById('gate-error');
    err.textContent = '';
    try {
      showGate(await TG.postJSON(path, body));
      document.getElementById('freeze-reason').value = '';
    } catch (e) {
      err.textContent = e.message;
    }
  }
  document.getElementById('freeze').addEventListener('click', () => changeGate('/admin/freeze', {
    reason: document.getElementById('freeze-reason').value.trim(),
    blockNewTurns: document.getElementById('freeze-block').checked,
  }));
  document.getElementById('thaw').addEventListener('click', () => changeGate('/admin/thaw', {}));

  showConversation();
  showConnection();
  loadGate();
  TG.startClock();
  if (state.conversationId) openConversation(state.conversationId);
  else for (const rec of state.turns) open(rec);
  showElsewhere();
  if (state.turns.length === 0) query.focus();
})();
