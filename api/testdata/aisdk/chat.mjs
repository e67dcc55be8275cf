// Drives the AI SDK's own chat (the `ai` package's AbstractChat with
// DefaultChatTransport, as useChat does) against a running tollgate, for
// api/aisdk_test.go: node chat.mjs <scenario> <API URL> <conversation id>.
// It prints one JSON line: the chat's messages as the SDK holds them at the
// end, and what happened on the way (see the scenarios below). Any failure
// exits 1 with the reason on stderr.
import {
  AbstractChat,
  DefaultChatTransport,
  lastAssistantMessageIsCompleteWithApprovalResponses,
  lastAssistantMessageIsCompleteWithToolCalls,
} from 'ai';

const [scenario, api, conversation] = process.argv.slice(2);
const deadline = Date.now() + 60_000;

// The smallest ChatState: what a framework's reactive store does, in
// plain arrays.
class State {
  constructor() {
    this.messages = [];
    this.status = 'ready';
    this.error = undefined;
  }
  pushMessage = m => {
    this.messages = this.messages.concat(m);
  };
  popMessage = () => {
    this.messages = this.messages.slice(0, -1);
  };
  replaceMessage = (i, m) => {
    this.messages = [...this.messages.slice(0, i), m, ...this.messages.slice(i + 1)];
  };
  snapshot = v => structuredClone(v);
}

class Chat extends AbstractChat {
  constructor(init) {
    super({ ...init, state: new State() });
  }
}

const log = [];
const errors = [];

function newChat(extra = {}) {
  return new Chat({
    id: conversation,
    transport: new DefaultChatTransport({ api: `${api}/ai-sdk/chat`, ...extra.transport }),
    // Both helpers, as an app with server tools that ask and client tools
    // would configure useChat.
    sendAutomaticallyWhen: ({ messages }) =>
      lastAssistantMessageIsCompleteWithApprovalResponses({ messages }) ||
      lastAssistantMessageIsCompleteWithToolCalls({ messages }),
    onError: e => errors.push(String(e?.message ?? e)),
    onData: part => log.push({ data: part.type }),
    ...extra.chat,
  });
}

// until waits for cond to hold, checking on every turn of the event loop's
// timers, up to the deadline.
async function until(what, cond) {
  while (!cond()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise(r => setTimeout(r, 20));
  }
}

const lastAssistant = chat => chat.messages.findLast(m => m.role === 'assistant');
const toolParts = m => (m?.parts ?? []).filter(p => p.type.startsWith('tool-') || p.type === 'dynamic-tool');
const asking = chat => toolParts(lastAssistant(chat)).filter(p => p.state === 'approval-requested');
const finished = chat =>
  chat.status === 'ready' && lastAssistant(chat)?.metadata?.tollgate?.finishReason != null;

// waitForApprovals waits until the chat is ready with n calls asking.
async function waitForApprovals(chat, n) {
  await until(`${n} approval requests`, () => chat.status === 'ready' && asking(chat).length >= n);
  return asking(chat);
}

// decide answers each asking call as decisions says (by tool name):
// approve, or decline with a reason.
async function decide(chat, decisions) {
  for (const p of asking(chat)) {
    const name = p.type.slice('tool-'.length);
    const d = decisions[name];
    if (d == null) throw new Error(`no decision for ${name}`);
    log.push({ decided: name, approved: d.approved });
    await chat.addToolApprovalResponse({ id: p.approval.id, approved: d.approved, reason: d.reason });
  }
}

const scenarios = {
  // A turn with only text.
  async tokens() {
    const chat = newChat();
    await chat.sendMessage({ text: 'hello' });
    await until('the turn to finish', () => finished(chat));
    return chat;
  },
  // The demo model's Read, Write and Bash: Write declined with a reason,
  // Bash approved, through addToolApprovalResponse.
  async decide() {
    const chat = newChat();
    await chat.sendMessage({ text: 'tidy up' });
    const asked = await waitForApprovals(chat, 2);
    log.push({ asked: asked.map(p => p.type) });
    await decide(chat, { Write: { approved: false, reason: 'no notes today' }, Bash: { approved: true } });
    await until('the turn to finish', () => finished(chat));
    return chat;
  },
  // A reload while the calls wait: a new chat, as a reloaded page makes,
  // resumes the stream, sees the calls ask again, and approves them.
  async resume() {
    const first = newChat();
    await first.sendMessage({ text: 'tidy up' });
    await waitForApprovals(first, 2);
    await first.dispose();
    const chat = newChat();
    await chat.resumeStream();
    const asked = await waitForApprovals(chat, 2);
    log.push({ resumed: asked.map(p => p.type) });
    await decide(chat, { Write: { approved: true }, Bash: { approved: true } });
    await until('the turn to finish', () => finished(chat));
    return chat;
  },
  // A client tool, run by onToolCall and answered with addToolOutput.
  async client() {
    let chat;
    chat = newChat({
      transport: {
        body: {
          clientTools: [{ name: 'PickColor', description: 'asks the user for a color', parameters: { type: 'object' } }],
        },
      },
      chat: {
        onToolCall: async ({ toolCall }) => {
          log.push({ onToolCall: toolCall.toolName, input: toolCall.input });
          if (toolCall.toolName === 'PickColor') {
            // No await: the SDK's docs say so, to avoid a deadlock.
            chat.addToolOutput({ tool: 'PickColor', toolCallId: toolCall.toolCallId, output: 'blue' });
          }
        },
      },
    });
    await chat.sendMessage({ text: 'paint it' });
    await until('the turn to finish', () => finished(chat));
    return chat;
  },
  // A subagent's call that asks, approved in the chat.
  async subagent() {
    const chat = newChat();
    await chat.sendMessage({ text: 'use a subagent to take notes' });
    const asked = await waitForApprovals(chat, 1);
    log.push({ asked: asked.map(p => p.type), subagent: asked.map(p => p.toolMetadata?.subagent) });
    await decide(chat, { Write: { approved: true } });
    await until('the turn to finish', () => finished(chat));
    return chat;
  },
};

const run = scenarios[scenario];
if (run == null) {
  console.error(`unknown scenario ${scenario}`);
  process.exit(2);
}
try {
  const chat = await run();
  console.log(JSON.stringify({ status: chat.status, messages: chat.messages, log, errors }));
} catch (e) {
  console.error(e?.stack ?? String(e));
  console.error(JSON.stringify({ log, errors }));
  process.exit(1);
}
