// The AG-UI tests' client: @ag-ui/client's HttpAgent against a running `helix-dbos serve`.
//
//   node agui_client.mjs SCENARIO '{"base": "http://127.0.0.1:8000", ...}'
//
// Each scenario drives the agent `assistant` (tests/agui/agents.py) the way a browser app does
// and prints one line `RESULT <json>` with what it saw; tests/agui/test_agui_js.py runs it and
// checks the result. Options: `base` (the server), `token` (sent as Authorization: Bearer),
// `threadId` (default: a new one), `decision` and `reason` (approvals).
import { HttpAgent, buildResumeArray } from "@ag-ui/client";

const [scenario, rawOptions] = process.argv.slice(2);
const options = JSON.parse(rawOptions ?? "{}");
const headers = options.token ? { Authorization: `Bearer ${options.token}` } : {};
const agentUrl = `${options.base}/agui/assistant`;

function newAgent(threadId = options.threadId) {
  return new HttpAgent({ url: agentUrl, headers, ...(threadId ? { threadId } : {}) });
}

async function frontendTools() {
  const response = await fetch(`${agentUrl}/tools`, { headers });
  if (!response.ok) throw new Error(`GET tools: HTTP ${response.status}`);
  return response.json();
}

// One run: what its events said. A RUN_ERROR does not throw: it is recorded.
async function run(agent, parameters = {}) {
  const seen = { types: [], results: {}, calls: {} };
  await agent.runAgent(parameters, {
    onEvent({ event }) {
      seen.types.push(event.type);
    },
    onToolCallEndEvent({ event, toolCallName, toolCallArgs }) {
      seen.calls[event.toolCallId] = { name: toolCallName, args: toolCallArgs };
    },
    onToolCallResultEvent({ event }) {
      seen.results[event.toolCallId] = { content: event.content, metadata: event.metadata };
    },
    onRunFinishedEvent(params) {
      seen.outcome = params.outcome;
      if (params.outcome === "success") seen.pending = params.pendingToolCallIds;
      if (params.outcome === "interrupt") seen.interrupts = params.interrupts;
    },
    onRunErrorEvent({ event }) {
      seen.error = { code: event.code, message: event.message, metadata: event.metadata };
    },
  });
  return seen;
}

function say(agent, text) {
  agent.addMessage({ id: `u_${crypto.randomUUID()}`, role: "user", content: text });
}

// The app's frontend tool: editContent applies its edits and reports how many.
function answer(agent, toolCallId, args) {
  const output = { applied: args.edits.length, failed: 0 };
  agent.addMessage({
    id: `t_${crypto.randomUUID()}`,
    role: "tool",
    toolCallId,
    content: JSON.stringify(output),
  });
}

function lastText(agent) {
  const texts = agent.messages.filter((m) => m.role === "assistant" && m.content);
  return texts.length ? texts[texts.length - 1].content : null;
}

function decide(agent) {
  const payload =
    options.decision === "approve"
      ? { approved: true }
      : { approved: false, reason: options.reason ?? "no" };
  const responses = Object.fromEntries(
    agent.pendingInterrupts.map((i) => [i.id, { status: "resolved", payload }]),
  );
  return buildResumeArray(agent.pendingInterrupts, responses);
}

const scenarios = {
  // A frontend tool call and its answer.
  async "client-tool"() {
    const agent = newAgent();
    const tools = await frontendTools();
    say(agent, 'replace "teh" with "the"');
    const first = await run(agent, { tools });
    for (const id of first.pending ?? []) answer(agent, id, first.calls[id].args);
    const second = await run(agent, { tools });
    return { threadId: agent.threadId, tools, first, second, text: lastText(agent) };
  },
  // Two frontend calls in one step, answered one run at a time.
  async batch() {
    const agent = newAgent();
    const tools = await frontendTools();
    say(agent, 'replace "a" with "b" and replace "c" with "d" separately');
    const first = await run(agent, { tools });
    const [one, two] = first.pending;
    answer(agent, one, first.calls[one].args);
    const second = await run(agent, { tools });
    answer(agent, two, first.calls[two].args);
    const third = await run(agent, { tools });
    return { first, second, third, text: lastText(agent) };
  },
  // An approval, answered as `decision` says.
  async approval() {
    const agent = newAgent();
    say(agent, "publish");
    const first = await run(agent);
    const resume = decide(agent);
    const second = await run(agent, { resume });
    return { first, second, resume, text: lastText(agent) };
  },
  // Stop at the approval: a page that is closed (or a server that dies) now.
  async park() {
    const agent = newAgent();
    say(agent, "publish");
    const first = await run(agent);
    return { threadId: agent.threadId, first };
  },
  // A reloaded page: a new agent on the thread, no history, a run with nothing new.
  async reconnect() {
    const agent = newAgent();
    const replay = await run(agent);
    return { replay, pendingInterrupts: agent.pendingInterrupts, messages: agent.messages };
  },
  // A reloaded page that then answers the approval it got again.
  async "reconnect-and-resume"() {
    const agent = newAgent();
    const replay = await run(agent);
    const resume = decide(agent);
    const second = await run(agent, { resume });
    const repeated = await run(agent, { resume });
    return { replay, second, repeated, text: lastText(agent) };
  },
  // A run whose HTTP answer is a refusal (auth): runAgent rejects with the status.
  async refused() {
    const agent = newAgent();
    say(agent, "hello");
    try {
      await run(agent);
      return { status: 200 };
    } catch (error) {
      return { status: error.status ?? null, payload: error.payload ?? null };
    }
  },
};

const chosen = scenarios[scenario];
if (!chosen) {
  console.error(`unknown scenario ${scenario}; one of: ${Object.keys(scenarios).join(", ")}`);
  process.exit(2);
}
const result = await chosen();
console.log(`RESULT ${JSON.stringify(result)}`);
