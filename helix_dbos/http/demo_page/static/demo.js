// The helix-dbos demo page: a client of the demo `editor` agent over the documented HTTP API.
//
// The flow of a turn:
//   POST /start (or POST /resume with_message)  ->  read GET /sse until the server closes it
//   -> the stream closes when the turn ends or parks on calls without an answer
//   -> answer the client calls (editContent runs here, on the document) with
//      POST /submit-tool-result, show Approve / Deny for approvals
//   -> after each accepted answer, read GET /sse again from the last event seen.
//
// Pending calls are acted on only when a stream has closed, that is when the page has caught
// up with every stored event: a page that replays a session (after a reload) sees old calls
// together with their answers, and never runs them again. An edit the page applied but could
// not submit (the tab closed in between) is remembered with its result and submitted again,
// never applied twice. An answer the server did not receive (it is down or restarting) is
// sent again until it does (postAnswer).
//
// The API is called with URLs relative to the page, so the page works under a path prefix.
'use strict';

(() => {
  const AGENT_TYPE = 'editor';
  const STORE_KEY = 'helix-dbos-demo';
  const SAMPLE_DOCUMENT =
    'Helix release notes\n\n' +
    'The quikc brown fox jumps over the lazy dog. Every turn of the agent is durable: ' +
    'a crash of the server loses nothing, and a tool that runs in your browser is ' +
    'waited for, for as long as its deadline allows.\n';
  // How often a dropped stream is opened again before the page gives up and says so.
  const STREAM_RETRIES = 5;
  // The chat and the inbox of this browser tell each other when they answer an approval.
  const CHANNEL = 'helix-dbos-demo';

  const $ = (id) => document.getElementById(id);
  const els = {
    session: $('session-id'),
    newChat: $('new-chat'),
    document: $('document'),
    version: $('document-version'),
    transcript: $('transcript'),
    status: $('status'),
    composer: $('composer'),
    message: $('message'),
    send: $('send'),
    stop: $('stop'),
  };

  // -- what survives a reload (sessionStorage: this tab only) ---------------------------------

  function freshState() {
    return { sessionId: null, token: null, document: SAMPLE_DOCUMENT, version: 0, applied: {} };
  }

  function loadState() {
    try {
      const saved = JSON.parse(sessionStorage.getItem(STORE_KEY) || 'null');
      if (saved && typeof saved === 'object') return { ...freshState(), ...saved };
    } catch (_) {
      // A corrupt entry is dropped: the page starts over.
    }
    return freshState();
  }

  let state = loadState();

  function save() {
    try {
      sessionStorage.setItem(STORE_KEY, JSON.stringify(state));
    } catch (_) {
      // Storage full or disabled: the page still works, it just forgets on reload.
    }
    holdSession();
  }

  // Every session this browser starts or joins, with its token, for the approvals page
  // (approvals.js): a session token lists only its own session's approvals, so that page asks
  // with each. localStorage, not sessionStorage: the approvals page may be open in another tab.
  const HELD_KEY = 'helix-dbos-demo-sessions';
  const HELD_MAX = 50;
  function holdSession() {
    if (!state.sessionId) return;
    try {
      const held = JSON.parse(localStorage.getItem(HELD_KEY) || '[]');
      const others = Array.isArray(held)
        ? held.filter((h) => h && h.sessionId !== state.sessionId)
        : [];
      const mine = { sessionId: state.sessionId, token: state.token || null };
      localStorage.setItem(HELD_KEY, JSON.stringify([mine, ...others].slice(0, HELD_MAX)));
    } catch (_) {
      // Storage disabled: the approvals page lists what the server lets it list without.
    }
  }

  // -- what this page view knows about the session --------------------------------------------

  let view;
  function resetView() {
    view = {
      epoch: (view ? view.epoch : 0) + 1, // bumped by "New conversation": old streams stop
      lastSequence: 0,
      turnActive: false,
      streaming: false,
      readAgain: false,
      sending: false,
      pending: new Map(), // toolCallId -> {toolCallId, toolName, input, kind, approvalId}
      submitted: new Set(), // calls this view already answered
      bubbles: new Map(), // "runId|step" -> {li, final}
      toolEntries: new Map(), // toolCallId -> li
      companionPolls: 0, // reads left while a companion's reply (and the turn it starts) is due
      companionReplied: false,
      heldReplies: [], // companion replies that came while a turn streamed: shown at its end
      sendingRun: null, // the run that sent to the companion
    };
  }
  resetView();

  // -- HTTP ---------------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error) || `HTTP ${status}`);
      this.status = status;
      this.code = (body && body.code) || '';
      this.retryable = status >= 500 || status === 429 || Boolean(body && body.retryable);
    }
  }

  function authHeaders() {
    return state.token ? { Authorization: `Bearer ${state.token}` } : {};
  }

  async function readError(response) {
    let body = null;
    try {
      body = await response.json();
    } catch (_) {
      // Not JSON (a proxy's page): the status says enough.
    }
    return new ApiError(response.status, body);
  }

  async function post(path, body) {
    const response = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...authHeaders() },
      body: JSON.stringify(body),
    });
    if (!response.ok) throw await readError(response);
    return response.json();
  }

  // -- the transcript -----------------------------------------------------------------------------

  function addEntry(kind, text) {
    const li = document.createElement('li');
    li.className = kind;
    li.textContent = text;
    els.transcript.append(li);
    return li;
  }

  // The transcript stays scrolled to its end while the reader is there: a new entry, a reply
  // that grows as it streams, a tool line that gets its result. Scrolling up to read stops
  // it; scrolling back to the end resumes it.
  function followTranscript() {
    const box = els.transcript;
    const atEnd = () => box.scrollHeight - box.scrollTop - box.clientHeight <= 24;
    let following = true;
    box.addEventListener('scroll', () => {
      following = atEnd();
    });
    new MutationObserver(() => {
      if (following) box.scrollTop = box.scrollHeight;
    }).observe(box, { childList: true, subtree: true, characterData: true });
  }

  function bubble(runId, step) {
    const key = `${runId}|${step}`;
    let entry = view.bubbles.get(key);
    if (!entry) {
      entry = { li: addEntry('assistant', ''), final: false };
      view.bubbles.set(key, entry);
    }
    return entry;
  }

  function setStatus(text, isError = false) {
    els.status.textContent = text;
    els.status.classList.toggle('error', isError);
  }

  function describe(error) {
    if (error instanceof ApiError) {
      if (error.status === 401 || error.status === 403) {
        return `The server refused this session's token (${error.code}): start a new conversation.`;
      }
      return `${error.message} (${error.code || error.status})`;
    }
    return `The server cannot be reached: ${error.message}`;
  }

  function outcomeText(data) {
    if ('output' in data) return { ok: true, text: JSON.stringify(data.output) };
    return { ok: false, text: data.errorText || data.error || 'failed' };
  }

  // -- events ---------------------------------------------------------------------------------------

  function onEvent(event) {
    const data = event.data || {};
    switch (event.type) {
      case 'turn_start':
        view.turnActive = true;
        setStatus('The agent is working…');
        break;
      case 'user_message':
        addEntry('user', data.text || '');
        break;
      case 'text_delta': {
        const entry = bubble(event.runId, data.step);
        if (!entry.final) entry.li.textContent += data.delta || '';
        break;
      }
      case 'text':
        if (data.text) {
          const entry = bubble(event.runId, data.step);
          entry.li.textContent = data.text; // the durable text wins over the live deltas
          entry.final = true;
        }
        break;
      case 'tool_start':
        if (data.toolName === 'companion__sendMessage') {
          // The reply comes later, as a companion_message event, and starts an editor turn.
          view.companionPolls = 30;
          view.sendingRun = event.runId;
        }
        if (data.kind === 'client') {
          remember({ ...data, kind: 'client' });
        } else if (!view.toolEntries.has(data.toolCallId)) {
          // A server tool (or an approved call, whose card already stands for it).
          view.toolEntries.set(data.toolCallId, addEntry('tool', `${data.toolName} runs…`));
        }
        break;
      case 'tool_approval_request':
        remember({ ...data, kind: 'approval' });
        break;
      case 'tool_approval_counted': // an approval a quorum counted: the call still waits
        quorumProgress(data);
        break;
      case 'pending': // a reconnect to a session that waits: the calls it waits on, sent
        // after the events the stream replays (so a known call is already remembered)
        for (const call of data.toolCalls || []) remember(call);
        break;
      case 'tool_end':
        finishCall(data);
        break;
      case 'companion_message': {
        const text = `${data.companion}: ${data.text || '(no reply text)'}`;
        // A reply that comes while the turn that sent the note still streams its announcement
        // ("its reply will appear here") shows after that turn's end, not before its text.
        if (view.turnActive) view.heldReplies.push(text);
        else addEntry('companion', text);
        view.companionReplied = true;
        break;
      }
      case 'turn_end':
        for (const text of view.heldReplies.splice(0)) addEntry('companion', text);
        if (view.companionReplied && event.runId !== view.sendingRun) view.companionPolls = 0;
        view.turnActive = false;
        for (const call of view.pending.values()) closeCall(call.toolCallId, 'closed: the turn ended');
        view.pending.clear();
        if (data.outcome && data.outcome !== 'completed') {
          const why = data.error && data.error.message ? `: ${data.error.message}` : '';
          addEntry('note', `The turn ended ${data.outcome}${why}`);
        }
        setStatus('Ready.');
        break;
      default:
        break; // suspended and future event types: nothing to show
    }
    updateControls();
  }

  function remember(call) {
    if (view.pending.has(call.toolCallId)) return;
    view.pending.set(call.toolCallId, call);
    if (view.toolEntries.has(call.toolCallId)) return;
    if (call.kind === 'approval') {
      view.toolEntries.set(call.toolCallId, approvalCard(call));
    } else {
      const count = Array.isArray(call.input && call.input.edits) ? call.input.edits.length : 0;
      const what = call.toolName === 'editContent' ? ` (${count} edit${count === 1 ? '' : 's'})` : '';
      view.toolEntries.set(call.toolCallId, addEntry('tool', `${call.toolName}${what} requested`));
    }
  }

  function approvalCard(call) {
    const li = addEntry('approval', '');
    const title = document.createElement('strong');
    title.textContent = `Approve ${call.toolName}?`;
    const input = document.createElement('pre');
    input.textContent = JSON.stringify(call.input, null, 2);
    const actions = document.createElement('div');
    actions.className = 'actions';
    actions.setAttribute('role', 'group');
    // A name without the tool's: "publishDocument" would also match the label "Document".
    actions.setAttribute('aria-label', 'Approval request');
    const approve = document.createElement('button');
    approve.type = 'button';
    approve.textContent = 'Approve';
    const deny = document.createElement('button');
    deny.type = 'button';
    deny.className = 'deny';
    deny.textContent = 'Deny';
    approve.addEventListener('click', () => decide(call, true));
    deny.addEventListener('click', () => decide(call, false));
    const outcome = document.createElement('p');
    outcome.className = 'outcome';
    actions.append(approve, deny);
    const policy = call.policy || {};
    if (Number(policy.quorum || 1) > 1 || policy.fourEyes) {
      // A decider with a name is needed (a quorum counts people; four eyes bars the asker):
      // this page's session token names nobody, the approvals page's approver tokens do.
      const note = document.createElement('p');
      note.className = 'quorum';
      const needed = Number(policy.quorum || 1);
      const who = needed > 1 ? `${needed} approvers` : 'an approver';
      note.append(`Needs ${who}${policy.fourEyes ? ', not you' : ''}: approve it in `);
      const link = document.createElement('a');
      link.href = 'inbox';
      link.target = '_blank';
      link.textContent = 'Approvals';
      note.append(link, '.');
      li.append(title, input, note, outcome);
    } else {
      li.append(title, input, actions, outcome);
    }
    return li;
  }

  // "Approved by 1 of 2 (ann)": a quorum's progress on its card, as the approvals come.
  function quorumProgress(data) {
    const li = view.toolEntries.get(data.toolCallId);
    if (!li || !li.classList.contains('approval')) return;
    const outcome = li.querySelector('.outcome');
    if (!outcome) return;
    const names = (data.approvers || []).filter(Boolean).join(', ');
    outcome.textContent =
      `Approved by ${data.approvals} of ${data.needed}` +
      `${names ? ` (${names})` : ''}; waiting for more approvers.`;
  }

  function cardOutcome(li, text, ok) {
    const actions = li.querySelector('.actions');
    if (actions) actions.remove();
    const outcome = li.querySelector('.outcome') || li;
    outcome.textContent = text;
    if (ok !== undefined) outcome.className = `outcome ${ok ? 'ok' : 'bad'}`;
  }

  function finishCall(data) {
    const call = view.pending.get(data.toolCallId);
    view.pending.delete(data.toolCallId);
    const li = view.toolEntries.get(data.toolCallId);
    const result = outcomeText(data);
    const text = result.ok
      ? `${data.toolName}: ${result.text}`
      : `${data.toolName} failed: ${result.text}`;
    if (li && li.classList.contains('approval')) cardOutcome(li, text, result.ok);
    else if (li) li.textContent = text;
    else addEntry('tool', text);
    if (li) li.classList.add(result.ok ? 'ok' : 'bad');
    return call;
  }

  function closeCall(toolCallId, text) {
    const li = view.toolEntries.get(toolCallId);
    if (li && li.classList.contains('approval')) cardOutcome(li, text);
  }

  // -- the stream -----------------------------------------------------------------------------------

  function handleFrame(frame) {
    let id = null;
    const data = [];
    for (const line of frame.split('\n')) {
      if (line.startsWith('id:')) id = Number(line.slice(3).trim());
      else if (line.startsWith('data:')) data.push(line.slice(5).replace(/^ /, ''));
      // ": keep-alive" comments and unknown fields are ignored, as EventSource does.
    }
    if (data.length) onEvent(JSON.parse(data.join('\n')));
    if (id !== null && Number.isFinite(id)) view.lastSequence = Math.max(view.lastSequence, id);
  }

  // Reads GET /sse from the last event seen until the server closes it. fetch (not EventSource)
  // so the token travels in a header, and so the page knows when the server has closed it.
  async function readStream(epoch) {
    const headers = authHeaders();
    if (view.lastSequence > 0) headers['Last-Event-ID'] = String(view.lastSequence);
    const query = new URLSearchParams({ sessionId: state.sessionId });
    const response = await fetch(`sse?${query}`, { headers, cache: 'no-store' });
    if (!response.ok) throw await readError(response);
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (epoch !== view.epoch) {
        reader.cancel();
        return;
      }
      if (done) return;
      buffer += value;
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        handleFrame(buffer.slice(0, cut));
        buffer = buffer.slice(cut + 2);
      }
    }
  }

  const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

  // Follows the session until it has nothing more to say now, then answers what it waits on.
  async function follow() {
    if (!state.sessionId) return;
    if (view.streaming) {
      view.readAgain = true; // the open stream's reader reads once more when it closes
      return;
    }
    const epoch = view.epoch;
    view.streaming = true;
    updateControls();
    try {
      do {
        view.readAgain = false;
        for (let attempt = 1; ; attempt += 1) {
          try {
            await readStream(epoch);
            break;
          } catch (error) {
            const transient = !(error instanceof ApiError) || error.retryable;
            if (!transient || attempt >= STREAM_RETRIES || epoch !== view.epoch) throw error;
            setStatus('The connection dropped; reconnecting…');
            await sleep(500 * attempt);
          }
        }
      } while (view.readAgain && epoch === view.epoch);
    } catch (error) {
      if (epoch === view.epoch) setStatus(describe(error), true);
      return;
    } finally {
      if (epoch === view.epoch) {
        view.streaming = false;
        updateControls();
      }
    }
    if (epoch === view.epoch) await settle();
  }

  // The stream has closed: run the client calls nobody has answered, then read on.
  async function settle() {
    let answered = false;
    for (const call of [...view.pending.values()]) {
      if (call.kind !== 'client' || view.submitted.has(call.toolCallId)) continue;
      view.submitted.add(call.toolCallId);
      setStatus(`Running ${call.toolName} in the page…`);
      const answer = runClientTool(call);
      if (await submit(call, answer)) answered = true;
    }
    if (answered) {
      await follow();
      return;
    }
    if (view.companionPolls > 0) {
      // A companion's reply is due: read again in a moment (the session is idle meanwhile).
      view.companionPolls -= 1;
      const epoch = view.epoch;
      setTimeout(() => epoch === view.epoch && follow(), 1000);
    }
    const waiting = [...view.pending.values()].filter((c) => !view.submitted.has(c.toolCallId));
    if (waiting.some((c) => c.kind === 'approval')) {
      setStatus('Waiting for your approval.');
      watchApprovals();
    } else if (!view.turnActive) setStatus('Ready.');
    updateControls();
  }

  // An approval may be answered elsewhere: in the inbox, another tab, from a shell. While one
  // waits, the page reads the session again every few seconds (the read replays what came
  // since, and ends at once while nothing did); a word from the inbox in this browser
  // (BroadcastChannel) makes it read at once. Either way the card shows how it was decided.
  const WATCH_MS = 3000;
  const channel = 'BroadcastChannel' in window ? new BroadcastChannel(CHANNEL) : null;

  function watchApprovals() {
    const epoch = view.epoch;
    clearTimeout(view.watch);
    view.watch = setTimeout(() => {
      if (epoch !== view.epoch || view.streaming) return;
      if (document.visibilityState !== 'visible') watchApprovals();
      else follow();
    }, WATCH_MS);
  }

  if (channel) {
    channel.onmessage = (message) => {
      const data = message.data || {};
      if (data.type === 'approval-answered' && data.sessionId === state.sessionId) follow();
    };
  }

  // An answer (a client tool's result, an approval) must not be lost to a server that is down
  // or restarting: a submit that did not reach it (no network, or a proxy's 502/503/504) is
  // sent again, with backoff, until the server answers. That is safe: the server stores one
  // answer per call and answers a repeat "already_completed". A definitive refusal (a 4xx, a
  // 500) is thrown to the caller, which shows it. Resolves to false if "New conversation"
  // replaced the session meanwhile (the answer is then dropped).
  const SUBMIT_RETRY_MAX_MS = 2000;

  function unreachable(error) {
    return !(error instanceof ApiError) || [502, 503, 504].includes(error.status);
  }

  async function postAnswer(body, what) {
    const epoch = view.epoch;
    for (let attempt = 1; ; attempt += 1) {
      try {
        await post('submit-tool-result', body);
        return epoch === view.epoch;
      } catch (error) {
        if (epoch !== view.epoch) return false;
        if (!unreachable(error)) throw error;
        setStatus(`The server cannot be reached; retrying ${what} (attempt ${attempt})…`, true);
        await sleep(Math.min(SUBMIT_RETRY_MAX_MS, 250 * 2 ** attempt));
        if (epoch !== view.epoch) return false;
      }
    }
  }

  async function submit(call, answer) {
    try {
      const body = { sessionId: state.sessionId, toolCallId: call.toolCallId, ...answer };
      return await postAnswer(body, `the result of ${call.toolName}`);
    } catch (error) {
      if (error instanceof ApiError && error.code === 'unknown_tool_call') {
        closeCall(call.toolCallId, 'closed: the call is no longer pending');
        view.pending.delete(call.toolCallId);
        addEntry('note', `${call.toolName} was not taken: ${error.message}`);
      } else {
        view.submitted.delete(call.toolCallId); // not stored: may be answered again
        setStatus(describe(error), true);
      }
      return false;
    }
  }

  // -- the client tool: editContent -----------------------------------------------------------------

  function runClientTool(call) {
    if (call.toolName === 'editContent') return applyEdits(call);
    return { error: `This page cannot run the client tool ${call.toolName}` };
  }

  // Each edit replaces every occurrence of `selector` (case-sensitive). An edit whose
  // selector is not in the document counts as failed.
  function applyEdits(call) {
    const done = state.applied[call.toolCallId];
    if (done) return { result: done }; // applied before a reload: submit the same result
    const edits = call.input && call.input.edits;
    if (!Array.isArray(edits)) return { error: 'editContent expects {"edits": [...]}' };
    let text = els.document.value;
    let applied = 0;
    let failed = 0;
    for (const edit of edits) {
      const selector = String((edit && edit.selector) ?? '');
      const replacement = String((edit && edit.replacement) ?? '');
      if (selector && text.includes(selector)) {
        text = text.split(selector).join(replacement);
        applied += 1;
      } else {
        failed += 1;
      }
    }
    if (applied > 0) {
      state.version += 1;
      els.document.value = text;
      els.document.classList.remove('changed');
      void els.document.offsetWidth; // restart the highlight
      els.document.classList.add('changed');
    }
    const result = { applied, failed, newVersionId: `v${state.version}` };
    state.document = text;
    state.applied[call.toolCallId] = result;
    save(); // the document and the record of this edit, in one write
    renderDocumentMeta();
    return { result };
  }

  // -- approvals --------------------------------------------------------------------------------------

  async function decide(call, approved) {
    const li = view.toolEntries.get(call.toolCallId);
    const buttons = li ? [...li.querySelectorAll('button')] : [];
    buttons.forEach((b) => {
      b.disabled = true;
    });
    try {
      const body = {
        kind: 'approval-response',
        sessionId: state.sessionId,
        toolCallId: call.toolCallId,
        approvalId: call.approvalId,
        approved,
        input: call.input, // what the human was shown: the server refuses a mismatch
        ...(approved ? {} : { reason: 'Denied in the demo page' }),
      };
      if (!(await postAnswer(body, approved ? 'your approval' : 'your denial'))) return;
    } catch (error) {
      buttons.forEach((b) => {
        b.disabled = false;
      });
      if (error instanceof ApiError && error.code === 'unknown_tool_call') {
        closeCall(call.toolCallId, `closed: ${error.message}`);
        view.pending.delete(call.toolCallId);
      } else {
        setStatus(describe(error), true);
      }
      return;
    }
    view.submitted.add(call.toolCallId);
    if (channel) channel.postMessage({ type: 'approval-answered', sessionId: state.sessionId });
    if (li) cardOutcome(li, approved ? 'Approved.' : 'Denied.');
    setStatus('The agent is working…');
    await follow();
  }

  // -- sending ---------------------------------------------------------------------------------------

  async function send(text) {
    view.sending = true;
    updateControls();
    try {
      const parked = view.turnActive && !view.streaming && view.pending.size > 0;
      if (parked) {
        // A new message over calls that wait: they are answered "abandoned" and the agent
        // reads the message (POST /resume with_message).
        await post('resume', {
          sessionId: state.sessionId,
          mode: 'with_message',
          message: text,
          abandonPending: true,
        });
      } else {
        const body = { agentType: AGENT_TYPE, message: text };
        if (state.sessionId) body.sessionId = state.sessionId;
        const answer = await post('start', body);
        state.sessionId = answer.sessionId;
        if (answer.token) state.token = answer.token;
        save();
        renderSession();
      }
      els.message.value = '';
      setStatus('The agent is working…');
    } catch (error) {
      setStatus(describe(error), true);
      return;
    } finally {
      view.sending = false;
      updateControls();
    }
    await follow();
  }

  async function stop() {
    if (!state.sessionId) return;
    try {
      await post('interrupt', { sessionId: state.sessionId });
    } catch (error) {
      setStatus(describe(error), true);
      return;
    }
    await follow();
  }

  // -- the page ---------------------------------------------------------------------------------------

  function updateControls() {
    const parked = view.turnActive && !view.streaming && view.pending.size > 0;
    els.send.disabled = view.sending || (view.turnActive && !parked);
    els.stop.disabled = !view.turnActive || view.sending;
  }

  function renderSession() {
    els.session.textContent = state.sessionId || 'none yet';
  }

  function renderDocumentMeta() {
    els.version.textContent = String(state.version);
  }

  function start() {
    // /#session=<id>&token=<token> joins a session (for example one an app created with a
    // token); the fragment never reaches the server, and is removed from the address bar.
    const fragment = new URLSearchParams(window.location.hash.slice(1));
    const session = fragment.get('session');
    if (session) {
      if (session !== state.sessionId) state = { ...freshState(), sessionId: session };
      if (fragment.get('token')) state.token = fragment.get('token');
      save();
      history.replaceState(null, '', window.location.pathname + window.location.search);
    }
    els.document.value = state.document;
    renderSession();
    renderDocumentMeta();
    updateControls();
    followTranscript();

    els.document.addEventListener('input', () => {
      state.document = els.document.value;
      save();
    });
    els.composer.addEventListener('submit', (event) => {
      event.preventDefault();
      const text = els.message.value.trim();
      if (text && !els.send.disabled) send(text);
    });
    els.stop.addEventListener('click', stop);
    els.newChat.addEventListener('click', () => {
      state = freshState();
      save();
      resetView();
      els.transcript.replaceChildren();
      els.document.value = state.document;
      renderSession();
      renderDocumentMeta();
      setStatus('Ready.');
      updateControls();
    });

    if (state.sessionId) {
      setStatus('Loading the conversation…');
      follow(); // replays the session's events, then answers what it waits on
    }
  }

  start();
})();
