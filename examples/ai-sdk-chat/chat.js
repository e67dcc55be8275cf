// The example chat: the AI SDK's AbstractChat (what useChat wraps) with a
// state that renders the page, DefaultChatTransport pointed at tollgate's
// POST /ai-sdk/chat, and the SDK's own approval flow: a call that asks is
// a tool part in the state approval-requested, and its buttons answer it
// with addToolApprovalResponse. docs/ai-sdk.md says what each part means.
import { AbstractChat, DefaultChatTransport, lastAssistantMessageIsCompleteWithApprovalResponses } from 'ai';

const $ = sel => document.querySelector(`[data-testid="${sel}"]`);

// The chat's id is tollgate's conversation id; the page keeps it in its
// address, so that a reload resumes the conversation's turn.
let conversation = location.hash.slice(1);
const resuming = conversation !== '';
if (!resuming) {
  conversation = `chat-${crypto.randomUUID()}`;
  history.replaceState(null, '', `#${conversation}`);
}
$('conversation').textContent = conversation;
$('new-conversation').addEventListener('click', e => {
  e.preventDefault();
  location.hash = '';
  location.reload();
});

const tokenInput = $('token');
tokenInput.value = sessionStorage.getItem('tollgate-token') ?? '';
tokenInput.addEventListener('change', () => sessionStorage.setItem('tollgate-token', tokenInput.value.trim()));

// State is the smallest ChatState: plain fields, and a render after each
// change, as a framework's reactive store would do.
class State {
  #messages = [];
  #status = 'ready';
  #error = undefined;
  get messages() {
    return this.#messages;
  }
  set messages(m) {
    this.#messages = m;
    render();
  }
  get status() {
    return this.#status;
  }
  set status(s) {
    this.#status = s;
    render();
  }
  get error() {
    return this.#error;
  }
  set error(e) {
    this.#error = e;
    render();
  }
  pushMessage = m => {
    this.messages = this.#messages.concat(m);
  };
  popMessage = () => {
    this.messages = this.#messages.slice(0, -1);
  };
  replaceMessage = (i, m) => {
    this.messages = [...this.#messages.slice(0, i), m, ...this.#messages.slice(i + 1)];
  };
  snapshot = v => structuredClone(v);
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

const chat = new Chat({
  id: conversation,
  transport: new DefaultChatTransport({
    api: '/ai-sdk/chat',
    headers: () => {
      const token = sessionStorage.getItem('tollgate-token');
      return token ? { Authorization: `Bearer ${token}` } : {};
    },
    // tollgate reads only the last message (the conversation's log is the
    // record): sending just it keeps a long chat under the body limit.
    prepareSendMessagesRequest: ({ id, messages, body, trigger, messageId }) => ({
      body: { ...body, id, messages: messages.slice(-1), trigger, messageId },
    }),
  }),
  // The answers go back to tollgate once every call that asked is answered.
  sendAutomaticallyWhen: lastAssistantMessageIsCompleteWithApprovalResponses,
});

$('composer').addEventListener('submit', e => {
  e.preventDefault();
  const text = $('query').value.trim();
  if (text === '' || chat.status === 'streaming' || chat.status === 'submitted') return;
  $('query').value = '';
  chat.sendMessage({ text });
});

if (resuming) {
  // A reload: the turn that runs or waits streams again from its start.
  chat.resumeStream();
}

// ---- rendering ------------------------------------------------------------

let scheduled = false;
function render() {
  if (scheduled) return;
  scheduled = true;
  queueMicrotask(() => {
    scheduled = false;
    draw();
  });
}

const el = (tag, attrs = {}, text) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  if (text != null) e.textContent = text;
  return e;
};

// Call cards are kept across renders, by part id, so that a reason being
// typed survives the stream's next chunk.
const cards = new Map();

function draw() {
  const list = $('messages');
  const seen = new Set();
  list.replaceChildren(
    ...chat.messages.map(m => {
      const box = el('div', { class: 'message', 'data-role': m.role, 'data-id': m.id });
      for (const p of m.parts) {
        if (p.type === 'text') {
          box.append(el('p', { class: 'text', 'data-testid': m.role === 'user' ? 'user-text' : 'answer' }, p.text));
        } else if (p.type.startsWith('tool-')) {
          seen.add(p.toolCallId);
          box.append(drawCall(m, p));
        } else if (p.type === 'data-tollgate-refused') {
          box.append(el('p', { class: 'refused', 'data-testid': 'refused', 'data-reason': p.data.reason }, refusal(p.data.reason)));
        } else if (p.type === 'data-tollgate-context-compacted') {
          box.append(el('p', { class: 'note', 'data-testid': 'compacted' }, 'tollgate compacted the conversation to fit the model'));
        }
      }
      const finish = m.metadata?.tollgate?.finishReason;
      if (m.role === 'assistant' && finish) {
        box.append(el('p', { class: 'note', 'data-testid': 'finish', 'data-reason': finish }, `finished: ${finish}`));
      }
      return box;
    }),
  );
  for (const id of cards.keys()) if (!seen.has(id)) cards.delete(id);
  $('status').textContent = chat.status === 'ready' ? '' : `${chat.status}…`;
  $('status').dataset.status = chat.status;
  const error = $('error');
  error.hidden = chat.error == null;
  error.textContent = chat.error ? `Error: ${chat.error.message}` : '';
}

// drawCall updates the card of tool part p of message m.
function drawCall(m, p) {
  let card = cards.get(p.toolCallId);
  if (card == null) {
    card = el('div', { class: 'call', 'data-testid': 'call' });
    card.append(
      el('span', { class: 'state', 'data-testid': 'call-state' }),
      el('span', { class: 'tool-name', 'data-testid': 'tool-name' }),
      el('pre', { 'data-testid': 'tool-input' }),
      el('pre', { class: 'preview', 'data-testid': 'preview', hidden: '' }),
      el('p', { class: 'note', 'data-testid': 'decision', hidden: '' }),
      el('pre', { 'data-testid': 'tool-output', hidden: '' }),
    );
    const actions = el('div', { class: 'actions', 'data-testid': 'approval-actions', hidden: '' });
    const reason = el('input', { 'data-testid': 'decline-reason', placeholder: 'reason (optional)' });
    const approve = el('button', { type: 'button', 'data-testid': 'approve' }, 'Approve');
    const decline = el('button', { type: 'button', 'data-testid': 'decline' }, 'Decline');
    const answer = approved => {
      actions.hidden = true;
      chat.addToolApprovalResponse({ id: card.dataset.approvalId, approved, reason: reason.value.trim() || undefined });
    };
    approve.addEventListener('click', () => answer(true));
    decline.addEventListener('click', () => answer(false));
    actions.append(approve, decline, reason);
    card.append(actions);
    cards.set(p.toolCallId, card);
  }
  const name = p.type.slice('tool-'.length);
  card.dataset.tool = name;
  card.dataset.state = p.state;
  card.dataset.approvalId = p.approval?.id ?? '';
  const sub = p.toolMetadata?.subagent;
  card.querySelector('[data-testid="tool-name"]').textContent = sub ? `${name} (subagent ${sub})` : name;
  card.querySelector('[data-testid="call-state"]').textContent = stateText(p);
  card.querySelector('[data-testid="tool-input"]').textContent = JSON.stringify(p.input ?? {}, null, 2);

  const asked = m.parts.find(q => q.type === 'data-tollgate-approval' && q.id === p.approval?.id)?.data;
  const preview = card.querySelector('[data-testid="preview"]');
  preview.hidden = !asked?.preview;
  preview.textContent = asked?.preview ?? '';

  const decided = m.parts.findLast(q => q.type === 'data-tollgate-decision' && q.data.toolCallId === p.toolCallId)?.data;
  const decision = card.querySelector('[data-testid="decision"]');
  decision.hidden = decided == null;
  decision.textContent = decided
    ? `${decided.decision}${decided.by ? ` by ${decided.by}` : ''}${decided.reason ? `: ${decided.reason}` : ''}`
    : '';

  const output = card.querySelector('[data-testid="tool-output"]');
  const text = p.state === 'output-available' ? String(p.output ?? '') : p.state === 'output-error' ? p.errorText : '';
  output.hidden = text === '';
  output.textContent = text;

  // The buttons show while the call asks; an answer hides them until the
  // stream says what became of it (asked again, when tollgate refused it).
  const actions = card.querySelector('[data-testid="approval-actions"]');
  if (p.state !== 'approval-requested') actions.hidden = true;
  else if (card.dataset.asked !== p.approval.id) actions.hidden = false;
  card.dataset.asked = p.state === 'approval-requested' ? p.approval.id : '';
  return card;
}

function stateText(p) {
  switch (p.state) {
    case 'input-streaming':
    case 'input-available':
      return 'running';
    case 'approval-requested':
      return 'waits for your approval';
    case 'approval-responded':
      return p.approval?.approved ? 'approved' : 'declined';
    case 'output-available':
      return 'done';
    case 'output-denied':
      return 'declined';
    case 'output-error':
      return 'failed';
    default:
      return p.state;
  }
}

function refusal(reason) {
  switch (reason) {
    case 'forbidden':
      return 'tollgate did not take your answer: someone else must decide this call (the policy asks for a second person)';
    case 'decided':
      return 'tollgate did not take your answer: the call was decided already';
    case 'expired':
      return 'tollgate did not take your answer: the call no longer waits (its time ran out)';
    default:
      return `tollgate did not take your answer (${reason})`;
  }
}

render();
