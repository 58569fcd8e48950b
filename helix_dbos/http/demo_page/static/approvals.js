// The helix-dbos demo's approvals page: the calls waiting for a human, across sessions.
//
// It lists GET /approvals (oldest first) and answers each approval through the same
// POST /submit-tool-result a chat uses (kind approval-response, with its approvalId and the
// arguments shown), so every rule of a submit holds: a forged or stale answer is refused, an
// approval whose turn was stopped answers run_stopped, a lapsed one deadline_lapsed.
//
// Who may list what is the server's authenticate hook's to decide. The page tries, in order:
//   1. GET /approvals with no credential: a server without authentication (or behind a proxy
//      that authenticates the browser) lists every session's approvals;
//   2. refused (401/403), the session tokens this browser holds: the chat page records every
//      session it starts, with its token, in localStorage ('helix-dbos-demo-sessions'); a
//      session token lists only its own session's approvals (GET /approvals?sessionId=...),
//      so the page asks once per session and merges the lists. An expired token is forgotten.
// Step 1 is skipped when the browser holds session tokens (the server uses them) or when it
// was refused before ('helix-dbos-demo-approvals-mode'): no request is sent to be refused,
// and the browser's console stays clean. Each approval is answered with the credential that
// listed it.
//
// Approver tokens name who decides (a principal, a tenant, roles), which an approval policy's
// quorum or four eyes need and a session token cannot give. The demo prints an address of
// this page holding two of them (inbox#approvers=<token>,<token>: a fragment, never sent to
// the server); the page keeps them in localStorage ('helix-dbos-demo-approvers') and offers
// "Approve as" each one's principal. With one chosen it lists its tenant's approvals with
// that token and answers with it, so two people's approvals can reach a quorum of two. The chat page and this one tell each other, on a BroadcastChannel, when they
// answer an approval, so the other shows it at once.
'use strict';

(() => {
  const HELD_KEY = 'helix-dbos-demo-sessions';
  const MODE_KEY = 'helix-dbos-demo-approvals-mode';
  const APPROVERS_KEY = 'helix-dbos-demo-approvers';
  const APPROVE_AS_KEY = 'helix-dbos-demo-approve-as';
  const channel = 'BroadcastChannel' in window ? new BroadcastChannel('helix-dbos-demo') : null;
  const PAGE_SIZE = 100;
  const POLL_MS = 5000;
  // How long a card answered here stays, with its outcome, once the list no longer has it.
  const KEEP_DECIDED_MS = 60000;

  const $ = (id) => document.getElementById(id);
  const els = {
    list: $('inbox'),
    status: $('inbox-status'),
    scope: $('scope'),
    refresh: $('refresh'),
    approver: $('approver'),
    approveAs: $('approve-as'),
  };

  // -- the sessions this browser holds a token for -------------------------------------------

  function heldSessions() {
    try {
      const held = JSON.parse(localStorage.getItem(HELD_KEY) || '[]');
      return Array.isArray(held) ? held.filter((h) => h && typeof h.sessionId === 'string') : [];
    } catch (_) {
      return [];
    }
  }

  function forget(sessionId) {
    try {
      const held = heldSessions().filter((h) => h.sessionId !== sessionId);
      localStorage.setItem(HELD_KEY, JSON.stringify(held));
    } catch (_) {
      // Storage disabled: nothing was held either.
    }
  }

  // -- the approver tokens this browser holds -------------------------------------------------

  // What an approver token says about itself: its payload is base64url JSON (the server
  // checks the signature; the page only shows the principal and drops expired tokens).
  function claimsOf(token) {
    try {
      const payload = token.split('.')[0].replace(/-/g, '+').replace(/_/g, '/');
      const claims = JSON.parse(atob(payload + '='.repeat((4 - (payload.length % 4)) % 4)));
      if (claims.role !== 'approver' || typeof claims.tenant !== 'string') return null;
      if (typeof claims.exp !== 'number' || claims.exp * 1000 <= Date.now()) return null;
      return { token, principal: claims.sub || '(no principal)', tenant: claims.tenant };
    } catch (_) {
      return null;
    }
  }

  function readStored(key) {
    try {
      return localStorage.getItem(key);
    } catch (_) {
      return null;
    }
  }

  function writeStored(key, value) {
    try {
      localStorage.setItem(key, value);
    } catch (_) {
      // Storage disabled: the page holds them for this visit only.
    }
  }

  let approvers = [];

  // The tokens of the address (#approvers=a,b) replace those held before; the address is
  // cleaned at once, so the tokens do not stay in the location bar or the history.
  function loadApprovers() {
    const fragment = new URLSearchParams(location.hash.slice(1)).get('approvers');
    let tokens;
    if (fragment) {
      tokens = fragment.split(',').filter(Boolean);
      writeStored(APPROVERS_KEY, JSON.stringify(tokens));
      history.replaceState(null, '', location.pathname + location.search);
    } else {
      try {
        tokens = JSON.parse(readStored(APPROVERS_KEY) || '[]');
      } catch (_) {
        tokens = [];
      }
    }
    approvers = (Array.isArray(tokens) ? tokens : []).map(claimsOf).filter(Boolean);
    const chosen = readStored(APPROVE_AS_KEY);
    els.approveAs.replaceChildren(
      ...approvers.map((a) => {
        const option = document.createElement('option');
        option.value = a.principal;
        option.textContent = a.principal;
        option.selected = a.principal === chosen;
        return option;
      }),
    );
    els.approver.hidden = approvers.length === 0;
  }

  function approver() {
    return approvers.find((a) => a.principal === els.approveAs.value) || approvers[0] || null;
  }

  // -- HTTP -----------------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, body) {
      super((body && body.error) || `HTTP ${status}`);
      this.status = status;
      this.code = (body && body.code) || '';
      this.reason = (body && body.reason) || '';
    }
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

  function bearer(token) {
    return token ? { Authorization: `Bearer ${token}` } : {};
  }

  async function getApprovals(query, token) {
    const params = new URLSearchParams({ limit: String(PAGE_SIZE), ...query });
    const response = await fetch(`approvals?${params}`, {
      headers: bearer(token),
      cache: 'no-store',
    });
    if (!response.ok) throw await readError(response);
    return response.json();
  }

  function storedMode() {
    try {
      return localStorage.getItem(MODE_KEY);
    } catch (_) {
      return null;
    }
  }

  function storeMode(mode) {
    try {
      localStorage.setItem(MODE_KEY, mode);
    } catch (_) {
      // Storage disabled: the page asks again next time.
    }
  }

  // Every approval the page may see, each with the token that answers it, oldest first.
  async function listAll() {
    const as = approver();
    if (as) {
      // The chosen approver's tenant, with its token: what it may decide.
      try {
        const page = await getApprovals({}, as.token);
        const items = page.approvals.map((a) => ({ ...a, token: as.token }));
        return { mode: 'approver', approver: as, more: Boolean(page.nextCursor), items };
      } catch (error) {
        if (!(error instanceof ApiError && error.status === 401)) throw error;
        // Signed with another secret (the demo started over): forget the approvers.
        writeStored(APPROVERS_KEY, '[]');
        loadApprovers();
      }
    }
    const withTokens = heldSessions().some((h) => h.token) || storedMode() === 'tokens';
    if (!withTokens) {
      try {
        const page = await getApprovals({}, null);
        storeMode('open');
        const items = page.approvals.map((a) => ({ ...a, token: null }));
        return { mode: 'open', more: Boolean(page.nextCursor), items };
      } catch (error) {
        const refused = error instanceof ApiError && (error.status === 401 || error.status === 403);
        if (!refused) throw error;
        storeMode('tokens');
      }
    }
    const held = heldSessions().filter((h) => h.token);
    const pages = await Promise.all(
      held.map(async (h) => {
        try {
          const page = await getApprovals({ sessionId: h.sessionId }, h.token);
          const items = page.approvals.map((a) => ({ ...a, token: h.token }));
          return { more: Boolean(page.nextCursor), items };
        } catch (error) {
          if (error instanceof ApiError && (error.status === 401 || error.status === 403)) {
            forget(h.sessionId); // an expired token, or one for a session that is gone
            return { more: false, items: [] };
          }
          throw error;
        }
      }),
    );
    const items = pages.flatMap((p) => p.items);
    items.sort((a, b) => a.createdAt - b.createdAt || (a.sessionId < b.sessionId ? -1 : 1));
    return { mode: 'tokens', sessions: held.length, more: pages.some((p) => p.more), items };
  }

  async function answer(approval, approved, reason) {
    const body = {
      kind: 'approval-response',
      sessionId: approval.rootSessionId,
      toolCallId: approval.toolCallId,
      approvalId: approval.approvalId,
      approved,
      input: approval.input, // what the human was shown: the server refuses a mismatch
      ...(!approved && reason ? { reason } : {}),
    };
    const response = await fetch('submit-tool-result', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', ...bearer(approval.token) },
      body: JSON.stringify(body),
    });
    if (!response.ok) throw await readError(response);
    return response.json();
  }

  // -- rendering ------------------------------------------------------------------------------

  function setStatus(text, isError = false) {
    els.status.textContent = text;
    els.status.classList.toggle('error', isError);
  }

  function duration(ms) {
    const s = Math.max(0, Math.round(ms / 1000));
    if (s < 120) return `${s} s`;
    if (s < 7200) return `${Math.round(s / 60)} min`;
    return `${Math.round(s / 3600)} h`;
  }

  function fact(text) {
    const p = document.createElement('p');
    p.className = 'facts';
    p.textContent = text;
    return p;
  }

  // rootSessionId|toolCallId -> its card, kept across refreshes (a reason being typed stays).
  let shown = new Map();

  function key(a) {
    return `${a.rootSessionId}|${a.toolCallId}`;
  }

  function card(approval) {
    const li = document.createElement('li');
    li.setAttribute('aria-label', `${approval.toolName} in ${approval.sessionId}`);
    const title = document.createElement('h3');
    title.textContent = approval.toolName;
    const args = document.createElement('pre');
    args.textContent = JSON.stringify(approval.input, null, 2);
    const waited = fact('');
    const owner = approval.principal ? `, started by ${approval.principal}` : '';
    const facts = fact(`Session ${approval.sessionId} (agent ${approval.agentType}${owner})`);
    const actions = document.createElement('div');
    actions.className = 'actions';
    const reasonId = `reason-${approval.toolCallId}-${approval.sessionId}`.replace(
      /[^A-Za-z0-9_-]/g,
      '_',
    );
    const label = document.createElement('label');
    label.htmlFor = reasonId;
    label.textContent = 'Reason';
    const reason = document.createElement('input');
    reason.id = reasonId;
    reason.type = 'text';
    reason.placeholder = 'why you deny it (the agent reads this)';
    const approve = document.createElement('button');
    approve.type = 'button';
    approve.textContent = 'Approve';
    const deny = document.createElement('button');
    deny.type = 'button';
    deny.className = 'deny';
    deny.textContent = 'Deny';
    actions.append(approve, deny, label, reason);
    const outcome = document.createElement('p');
    outcome.className = 'outcome';
    outcome.setAttribute('role', 'status');
    li.append(title, facts, waited, args, actions, outcome);

    li.refresh = (a, at) => {
      li.approval = a;
      const waitedMs = a.ageMs + (Date.now() - at);
      waited.textContent =
        `Waiting ${duration(waitedMs)}; expires ${new Date(a.deadlineAt).toLocaleString()}` +
        ` (in ${duration(a.deadlineAt - Date.now())})` +
        quorumText(a.quorum);
    };

    async function decide(approved) {
      approve.disabled = deny.disabled = reason.disabled = true;
      outcome.className = 'outcome';
      outcome.textContent = approved ? 'Sending your approval…' : 'Sending your denial…';
      try {
        const answered = await answer(li.approval, approved, reason.value.trim());
        const counted = answered.continuation && answered.continuation.kind === 'awaiting_quorum';
        outcome.classList.add(approved ? 'ok' : 'bad');
        const as = approver();
        const by = as ? ` as ${as.principal}` : '';
        outcome.textContent = counted
          ? `Approved${by}; the quorum waits for more approvers.`
          : approved
            ? `Approved${by}.`
            : `Denied${by}.`;
        if (counted) {
          // The call still waits: another approver (Approve as) may approve it now.
          approve.disabled = deny.disabled = reason.disabled = false;
        } else {
          li.doneAt = Date.now();
          li.classList.add('decided');
        }
        if (channel) {
          channel.postMessage({
            type: 'approval-answered',
            sessionId: li.approval.rootSessionId,
          });
        }
        if (counted) refresh(); // the card shows the quorum's new count
      } catch (error) {
        if (error instanceof ApiError && error.code === 'unknown_tool_call') {
          // Answered elsewhere, stopped or lapsed meanwhile: nothing to decide any more.
          outcome.textContent = `No longer waiting (${error.reason || error.code}).`;
          li.doneAt = Date.now();
          li.classList.add('decided');
        } else {
          approve.disabled = deny.disabled = reason.disabled = false;
          outcome.classList.add('bad');
          outcome.textContent = describe(error);
        }
      }
    }
    approve.addEventListener('click', () => decide(true));
    deny.addEventListener('click', () => decide(false));
    return li;
  }

  // An approval policy's state: "approved by 1 of 2 (ann)", and an escalation.
  function quorumText(q) {
    if (!q) return '';
    let text = q.needed > 1 ? `; approved by ${q.text}` : '';
    if (q.needed > 1 && q.approvers.length) text += ` (${q.approvers.join(', ')})`;
    if (q.escalated) text += `; escalated to ${(q.escalateTo || []).join(', ')}`;
    return text;
  }

  function describe(error) {
    if (error instanceof ApiError) return `${error.message} (${error.code || error.status})`;
    return `The server cannot be reached: ${error.message}`;
  }

  // keepDecided: a card answered here stays a while with its outcome after the list has
  // dropped it (not after Refresh, which shows what waits now, and only that).
  function render(listing, listedAt, keepDecided) {
    const next = new Map();
    for (const approval of listing.items) {
      const k = key(approval);
      const li = shown.get(k) || card(approval);
      li.refresh(approval, listedAt);
      next.set(k, li);
    }
    let decided = 0;
    for (const [k, li] of shown) {
      const recent = li.doneAt && Date.now() - li.doneAt < KEEP_DECIDED_MS;
      if (keepDecided && recent && !next.has(k)) {
        next.set(k, li);
        decided += 1;
      }
    }
    els.list.replaceChildren(...next.values());
    shown = next;
    const n = listing.items.length;
    const more = listing.more ? ' (the oldest shown first; more are waiting)' : '';
    const plural = n === 1 ? '' : 's';
    const answered = decided ? ` Below: ${decided} answered here.` : '';
    setStatus(
      (n === 0 ? 'No approval is waiting.' : `${n} approval${plural} waiting${more}.`) + answered,
    );
    els.scope.textContent =
      listing.mode === 'approver'
        ? `Approving as ${listing.approver.principal}: the approvals of tenant ` +
          `${listing.approver.tenant}, with an approver token.`
        : listing.mode === 'open'
          ? 'Every session of this server.'
          : `The server uses session tokens: the approvals of the ${listing.sessions} ` +
            `conversation${listing.sessions === 1 ? '' : 's'} this browser started.`;
  }

  let loading = false;
  let again = false;
  async function refresh(keepDecided = true) {
    if (loading) {
      again = true; // asked while a listing runs: list once more after it
      return;
    }
    loading = true;
    try {
      const listedAt = Date.now();
      render(await listAll(), listedAt, keepDecided);
    } catch (error) {
      setStatus(describe(error), true);
    } finally {
      loading = false;
    }
    if (again) {
      again = false;
      refresh(keepDecided);
    }
  }

  els.refresh.addEventListener('click', () => refresh(false));
  els.approveAs.addEventListener('change', () => {
    writeStored(APPROVE_AS_KEY, els.approveAs.value);
    refresh();
  });
  if (channel) {
    // The chat answered one: list again now, not at the next poll.
    channel.onmessage = (message) => {
      if ((message.data || {}).type === 'approval-answered') refresh();
    };
  }
  setInterval(() => {
    if (document.visibilityState === 'visible') refresh();
  }, POLL_MS);
  loadApprovers();
  refresh();
})();
