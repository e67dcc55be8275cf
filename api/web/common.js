// Helpers shared by the console (/) and the inbox (/inbox): building DOM
// nodes, pretty JSON, the diff of a Write or Edit call, the live clock and
// the approve / decline / edit panel. Plain JavaScript, no build step.
'use strict';

const TG = (() => {
  // h builds an element. attrs: class, dataset via "data-*", testid, and
  // any other attribute; children: nodes or strings (as text, never HTML).
  function h(tag, attrs, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'testid') el.dataset.testid = v;
      else if (k === 'text') el.textContent = v;
      else if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const c of children.flat(Infinity)) {
      if (c === undefined || c === null || c === false) continue;
      el.append(c instanceof Node ? c : document.createTextNode(String(c)));
    }
    return el;
  }

  // parseObject returns the JSON object in text, or null.
  function parseObject(text) {
    try {
      const v = JSON.parse(text);
      return v && typeof v === 'object' && !Array.isArray(v) ? v : null;
    } catch {
      return null;
    }
  }

  // pretty indents JSON text; text that is not JSON comes back as it is.
  function pretty(text) {
    try {
      return JSON.stringify(JSON.parse(text), null, 2);
    } catch {
      return String(text ?? '');
    }
  }

  // summary is the one-line gist of a tool call for its header.
  function summary(tool, args) {
    const a = parseObject(args) || {};
    switch (tool) {
      case 'Read':
      case 'Write':
      case 'Edit':
        return a.file_path || '';
      case 'Bash':
        return a.command || '';
      case 'Task':
        return [a.subagent_type, a.description].filter(Boolean).join(': ');
      default:
        return '';
    }
  }

  const maxDiffCells = 250000;

  // lineDiff returns the lines of a and b as a shortest edit script:
  // [{op: ' ' | '-' | '+', text}], by the longest common subsequence of
  // lines. Very long inputs fall back to all removed, then all added.
  function lineDiff(a, b) {
    const x = a === '' ? [] : a.split('\n');
    const y = b === '' ? [] : b.split('\n');
    if (x.length * y.length > maxDiffCells) {
      return [...x.map((text) => ({ op: '-', text })), ...y.map((text) => ({ op: '+', text }))];
    }
    // lcs[i][j]: length of the LCS of x[i:] and y[j:].
    const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
    for (let i = x.length - 1; i >= 0; i--) {
      for (let j = y.length - 1; j >= 0; j--) {
        lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
      }
    }
    const out = [];
    let i = 0;
    let j = 0;
    while (i < x.length && j < y.length) {
      if (x[i] === y[j]) {
        out.push({ op: ' ', text: x[i] });
        i++;
        j++;
      } else if (lcs[i + 1][j] >= lcs[i][j + 1]) {
        out.push({ op: '-', text: x[i++] });
      } else {
        out.push({ op: '+', text: y[j++] });
      }
    }
    while (i < x.length) out.push({ op: '-', text: x[i++] });
    while (j < y.length) out.push({ op: '+', text: y[j++] });
    return out;
  }

  // diffView shows the change a Write or Edit call would make, or returns
  // null for other tools. Write: its content as added lines (tollgate does
  // not read the file it would replace). Edit: old_string → new_string.
  function diffView(tool, args) {
    const a = parseObject(args);
    if (!a) return null;
    let title;
    let lines;
    if (tool === 'Write' && typeof a.content === 'string') {
      // Only the worker knows what the file holds now: its preview, on the
      // approval request, says what the write replaces.
      title = `write ${a.file_path || '?'}: the new content`;
      lines = lineDiff('', a.content.replace(/\n$/, ''));
    } else if (tool === 'Edit' && (typeof a.old_string === 'string' || typeof a.new_string === 'string')) {
      title = `edit ${a.file_path || '?'}${a.replace_all ? ' (every occurrence)' : ''}`;
      lines = lineDiff(a.old_string || '', a.new_string || '');
    } else {
      return null;
    }
    const added = lines.filter((l) => l.op === '+').length;
    const removed = lines.filter((l) => l.op === '-').length;
    return h('div', { class: 'diff', testid: 'diff' },
      h('div', { class: 'diff-head' }, title, ' ',
        h('span', { class: 'diff-add' }, `+${added}`), ' ',
        tool === 'Write' ? null : h('span', { class: 'diff-del' }, `−${removed}`)),
      h('pre', { class: 'diff-body' },
        lines.map((l) => h('span', {
          class: l.op === '+' ? 'dl add' : l.op === '-' ? 'dl del' : 'dl ctx',
          testid: l.op === '+' ? 'diff-add' : l.op === '-' ? 'diff-del' : 'diff-ctx',
        }, `${l.op} ${l.text}`))));
  }

  // previewView shows what a call will do as the worker read it (the
  // approval request's preview: the real diff against the file, a command
  // line by line), or returns null when there is none.
  function previewView(preview) {
    if (!preview) return null;
    const [head, ...body] = preview.split('\n');
    return h('div', { class: 'preview', testid: 'preview' },
      h('div', { class: 'preview-head' }, head),
      body.length ? h('pre', { class: 'preview-body' }, body.map((l) => h('span', {
        class: l.startsWith('+ ') ? 'dl add' : l.startsWith('- ') ? 'dl del' : 'dl ctx',
      }, l))) : null);
  }

  // sandboxView shows what a Bash call did in the sandbox before anyone
  // was asked (the approval request's sandbox): how it ended, each file it
  // added, changed, deleted or renamed with its diff, and its output. An
  // approve applies exactly these changes.
  function sandboxView(run) {
    if (!run) return null;
    const ended = run.timedOut ? 'timed out' : run.signal ? `killed (${run.signal})` : `exit ${run.exitCode}`;
    const changes = run.changes || [];
    const head = run.unavailable
      ? `not run in the sandbox: ${run.unavailable}`
      : `ran in the sandbox: ${ended} · ${changes.length} ${changes.length === 1 ? 'file' : 'files'} changed`;
    const lines = (text) => h('pre', { class: 'preview-body' }, text.split('\n').map((l) => h('span', {
      class: l.startsWith('+') ? 'dl add' : l.startsWith('-') ? 'dl del' : 'dl ctx',
    }, l)));
    return h('div', { class: 'preview sandbox', testid: 'sandbox' },
      h('div', { class: 'preview-head' }, head),
      run.tooLarge ? h('div', { class: 'sandbox-too-large', testid: 'sandbox-too-large' }, `an approve applies nothing: ${run.tooLarge}`) : null,
      h('ul', { class: 'sandbox-changes' }, changes.map((c) => h('li', { testid: 'sandbox-change', 'data-op': c.op, 'data-path': c.path },
        h('span', { class: 'badge', 'data-status': c.op }, c.op), ' ',
        h('code', {}, c.from ? `${c.from} → ${c.path}` : c.path),
        c.binary ? ` (binary, ${c.size} bytes)` : null,
        c.diff ? lines(c.diff) : null))),
      run.output ? h('details', { testid: 'sandbox-output' }, h('summary', {}, 'output'), h('pre', { class: 'preview-body' }, run.output)) : null);
  }

  // argsView shows a call's arguments as indented JSON.
  function argsView(args) {
    return h('pre', { class: 'json', testid: 'tool-args' }, pretty(args));
  }

  // clock formats a duration in milliseconds as 0:07, 2:41, 1:02:03 or 3d 4h.
  function clock(ms) {
    const s = Math.max(0, Math.floor(ms / 1000));
    const d = Math.floor(s / 86400);
    const hh = Math.floor((s % 86400) / 3600);
    const mm = Math.floor((s % 3600) / 60);
    const ss = String(s % 60).padStart(2, '0');
    if (d > 0) return `${d}d ${hh}h`;
    if (hh > 0) return `${hh}:${String(mm).padStart(2, '0')}:${ss}`;
    return `${mm}:${ss}`;
  }

  // tick updates every live time on the page: data-expires-at counts down,
  // data-since counts up.
  function tick() {
    const now = Date.now();
    for (const el of document.querySelectorAll('[data-expires-at]')) {
      const left = Date.parse(el.dataset.expiresAt) - now;
      if (Number.isNaN(left)) continue;
      el.textContent = left > 0 ? `expires in ${clock(left)}` : 'expired';
      el.classList.toggle('soon', left > 0 && left < 30000);
      el.classList.toggle('expired', left <= 0);
    }
    for (const el of document.querySelectorAll('[data-since]')) {
      const age = now - Date.parse(el.dataset.since);
      if (!Number.isNaN(age)) el.textContent = `waiting ${clock(age)}`;
    }
  }

  function startClock() {
    tick();
    setInterval(tick, 1000);
  }

  // expiry is a live countdown to t.
  function expiry(t) {
    const el = h('span', { class: 'expires', testid: 'expires', 'data-expires-at': t, title: t ? `expires at ${new Date(t).toLocaleString()}` : '' });
    if (t) setTimeout(tick, 0);
    return el;
  }

  // age is a live count of the time since t.
  function age(t) {
    const el = h('span', { class: 'age', testid: 'age', 'data-since': t, title: t ? `requested at ${new Date(t).toLocaleString()}` : '' });
    if (t) setTimeout(tick, 0);
    return el;
  }

  // The API's bearer token, when it asks for one, as typed into the top
  // bar's token field; kept in localStorage and sent with every API call.
  const tokenKey = 'tollgate.apiToken';

  function token() {
    try {
      return localStorage.getItem(tokenKey) || '';
    } catch {
      return '';
    }
  }

  // authHeaders returns headers plus Authorization when a token is set.
  function authHeaders(headers) {
    const t = token();
    return t ? { ...headers, Authorization: `Bearer ${t}` } : headers;
  }

  // The token field: a change is kept and announced as 'tollgate-token',
  // so a page can ask again at once.
  const tokenInput = document.getElementById('api-token');
  if (tokenInput) {
    tokenInput.value = token();
    tokenInput.addEventListener('change', () => {
      try {
        const v = tokenInput.value.trim();
        if (v) localStorage.setItem(tokenKey, v);
        else localStorage.removeItem(tokenKey);
      } catch {
        // storage denied: the token lasts until the page is left
      }
      document.dispatchEvent(new Event('tollgate-token'));
    });
  }

  // postJSON sends body to path and returns the API's answer, or throws
  // with its error.
  async function postJSON(path, body) {
    const resp = await fetch(path, {
      method: 'POST',
      headers: authHeaders({ 'Content-Type': 'application/json' }),
      body: JSON.stringify(body),
    });
    const out = await resp.json().catch(() => ({}));
    if (!resp.ok) throw new Error(out.error || `HTTP ${resp.status}`);
    return out;
  }

  // decide sends a decision to POST /chat/approval and returns its answer,
  // {accepted} or throws with the API's error.
  const decide = (body) => postJSON('/chat/approval', body);

  // batchPanel is the "Approve all" / "Decline all" (with one reason) bar
  // of the pending requests of one turn: requestIds() names them when a
  // button is clicked, and one POST /chat/approvals decides them all, or
  // none (the answer names the one refused). Its show(n) shows it for n
  // requests, hides it below two.
  function batchPanel({ requestIds }) {
    const status = h('span', { class: 'decision-status', testid: 'batch-status', role: 'status' });
    const reason = h('input', { type: 'text', class: 'reason', testid: 'decline-all-reason', placeholder: 'reason for all (optional)', 'aria-label': 'reason for declining all' });
    const approveAll = h('button', { type: 'button', class: 'approve', testid: 'approve-all' });
    const declineAll = h('button', { type: 'button', class: 'decline', testid: 'decline-all' }, 'Decline all');
    const setBusy = (busy) => {
      approveAll.disabled = declineAll.disabled = reason.disabled = busy;
    };
    const send = async (decision) => {
      const ids = requestIds();
      const why = reason.value.trim();
      setBusy(true);
      status.className = 'decision-status';
      status.textContent = 'sending…';
      try {
        const out = await postJSON('/chat/approvals', {
          decisions: ids.map((requestId) => (decision === 'decline' && why ? { requestId, decision, reason: why } : { requestId, decision })),
        });
        if (out.accepted) {
          status.textContent = `${decision === 'approve' ? 'approved' : 'declined'} ${out.decided}; waiting for the turn…`;
          status.classList.add('ok');
        } else {
          status.textContent = `none taken: ${out.message || out.reason}`;
          status.classList.add('bad');
          setBusy(false);
        }
      } catch (err) {
        status.textContent = `could not send: ${err.message}`;
        status.classList.add('bad');
        setBusy(false);
      }
    };
    approveAll.addEventListener('click', () => send('approve'));
    declineAll.addEventListener('click', () => send('decline'));
    const panel = h('div', { class: 'batch-panel', testid: 'batch-actions', hidden: true },
      h('div', { class: 'row' }, approveAll, reason, declineAll, status));
    panel.show = (n) => {
      approveAll.textContent = `Approve all ${n}`;
      panel.hidden = n < 2;
    };
    return panel;
  }

  // decisionPanel is the approve / decline (with a reason) / edit the
  // arguments and approve panel of one approval request. onSent(decision,
  // accepted) is called once the API answered; onVote(result), when set,
  // once it took a vote that leaves the call waiting (a quorum's).
  //
  // For a call that ran in the sandbox (sandboxed), Approve applies what
  // it changed there; "Run unconfined" runs the command for real instead,
  // a separate decision the ledger records, and the only way to run an
  // edited command (the sandbox ran the model's).
  function decisionPanel({ requestId, arguments: args, sandboxed, onSent, onVote }) {
    const status = h('span', { class: 'decision-status', testid: 'approval-status', role: 'status' });
    const reason = h('input', { type: 'text', class: 'reason', testid: 'decline-reason', placeholder: 'reason (optional)', 'aria-label': 'reason for declining' });
    const editor = h('textarea', { class: 'json edit-args', testid: 'edit-args', rows: 8, spellcheck: 'false', 'aria-label': 'edited arguments' });
    editor.value = pretty(args);
    const editBox = h('div', { class: 'edit-box', hidden: true });
    const buttons = [];
    const button = (label, cls, testid, onclick) => {
      const b = h('button', { type: 'button', class: cls, testid, onclick });
      b.textContent = label;
      buttons.push(b);
      return b;
    };
    const setBusy = (busy) => {
      for (const b of buttons) b.disabled = busy;
      reason.disabled = busy;
      editor.disabled = busy;
    };
    const send = async (body) => {
      setBusy(true);
      status.className = 'decision-status';
      status.textContent = 'sending…';
      try {
        const out = await decide({ requestId, ...body });
        if (out.accepted && out.pending) {
          // A vote of a quorum's: the call waits for more, which another
          // person (with their own token) may cast from this panel.
          status.textContent = out.message || 'vote recorded; waiting for more votes';
          status.classList.add('ok');
          setBusy(false);
          if (onVote) onVote(out);
          return;
        }
        if (out.accepted) {
          status.textContent = body.decision === 'approve' ? 'approved; waiting for the turn…' : 'declined; waiting for the turn…';
          status.classList.add('ok');
        } else {
          status.textContent = `not accepted: ${({ decided: 'this request was decided already', expired: 'this request has expired', unknown: 'this request is unknown', forbidden: 'the policy says someone else must decide it', voted: out.message || 'you have voted on it already' })[out.reason] || 'this request expired, was decided already, or is unknown'}`;
          status.classList.add('bad');
          if (out.reason === 'voted' || out.reason === 'forbidden') {
            // Another person may still decide from here.
            setBusy(false);
            return;
          }
        }
        panel.dataset.sent = body.decision;
        if (onSent) onSent(body.decision, !!out.accepted);
      } catch (err) {
        status.textContent = `could not send: ${err.message}`;
        status.classList.add('bad');
        setBusy(false);
      }
    };
    const approveEdited = () => {
      const edited = parseObject(editor.value);
      if (!edited) {
        status.className = 'decision-status bad';
        status.textContent = 'the edited arguments must be a JSON object';
        return;
      }
      send({ decision: 'approve', arguments: JSON.stringify(edited), ...(sandboxed ? { unconfined: true } : {}) });
    };
    editBox.append(editor, h('div', { class: 'row' },
      button(sandboxed ? 'Run these arguments unconfined' : 'Approve with these arguments', 'approve', 'approve-edited', approveEdited)));
    const panel = h('div', { class: 'decision-panel', testid: 'approval-actions', 'data-request-id': requestId },
      h('div', { class: 'row' },
        button(sandboxed ? 'Apply these changes' : 'Approve', 'approve', 'approve', () => send({ decision: 'approve' })),
        sandboxed ? button('Run unconfined', 'secondary', 'approve-unconfined', () => send({ decision: 'approve', unconfined: true })) : null,
        reason,
        button('Decline', 'decline', 'decline', () => send({ decision: 'decline', reason: reason.value.trim() })),
        button('Edit arguments', 'secondary', 'edit', () => {
          editBox.hidden = !editBox.hidden;
          if (!editBox.hidden) editor.focus();
        }),
        status),
      editBox);
    reason.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') {
        e.preventDefault();
        send({ decision: 'decline', reason: reason.value.trim() });
      }
    });
    return panel;
  }

  // votesView says who may decide a call (deciders, when its rule names
  // them) and, for a rule with a quorum, where its voting stands (votes):
  // the approvals and declines so far of those needed, each vote, and who
  // may still vote.
  function votesView(deciders, votes) {
    const el = h('div', { class: 'meta votes', testid: 'approval-votes' });
    votesText(el, deciders, votes);
    return el;
  }

  function votesText(el, deciders, votes) {
    const parts = [];
    if (votes) {
      const cast = votes.cast || [];
      const approvals = cast.filter((v) => v.decision === 'approve').length;
      const declines = cast.filter((v) => v.decision === 'decline').length;
      parts.push(`votes: ${approvals} of ${votes.quorum} approvals`);
      if (votes.declines > 1 || declines > 0) parts.push(`${declines} of ${votes.declines} declines`);
      if (cast.length) parts.push(cast.map((v) => `${v.by} ${v.decision === 'approve' ? 'approved' : 'declined'}`).join(', '));
      if (votes.mayVote && votes.mayVote.length) parts.push(`may still vote: ${votes.mayVote.join(', ')}`);
    } else if (deciders && deciders.length) {
      parts.push(`deciders: ${deciders.join(', ')}`);
    }
    el.textContent = parts.join(' · ');
    el.hidden = parts.length === 0;
    if (deciders && deciders.length) el.dataset.deciders = deciders.join(',');
  }

  return { h, parseObject, summary, votesView, votesText, diffView, previewView, sandboxView, argsView, tick, startClock, expiry, age, authHeaders, postJSON, decisionPanel, batchPanel };
})();
