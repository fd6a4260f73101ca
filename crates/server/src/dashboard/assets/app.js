// The mcp-taskd dashboard: hash routes (#overview, #tasks, #tools, #schedules, #webhooks,
// #task/ID), polling the JSON API once a second for what is on screen (a task page also
// follows its output), charts drawn as inline SVG. Every value from the server goes in as
// textContent.
"use strict";

const base = location.pathname.endsWith("/") ? location.pathname : location.pathname + "/";
const $ = (id) => document.getElementById(id);
let csrf = null;
let traceUrl = null;     // telemetry.trace_url: a viewer's URL with {trace_id} in it
let pageStack = [];      // "before" cursors of the pages shown, for "Newest"
let cursor = null;       // the "before" of the page on screen (null: the newest)
let nextCursor = null;
let currentTask = null;
let timer = null;
let signInOffered = false; // the server offers its identity provider's sign-in (its 401 says so)

function notice(text) { $("notice").textContent = text || ""; }

async function api(path, options = {}) {
  const headers = { "Accept": "application/json" };
  if (options.method === "POST") {
    headers["Content-Type"] = "application/json";
    if (csrf) headers["X-CSRF-Token"] = csrf;
  }
  const response = await fetch(base + path, { credentials: "same-origin", ...options, headers });
  let body = null;
  try { body = await response.json(); } catch (_) { body = null; }
  if (response.status === 401) {
    signInOffered = Boolean(body && body.signIn);
    showLogin();
    throw new Error("login required");
  }
  if (!response.ok) throw new Error((body && body.error) || ("HTTP " + response.status));
  return body;
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "text") node.textContent = v; else node.setAttribute(k, v);
  }
  for (const child of children) node.append(child);
  return node;
}

function showOnly(id) {
  for (const section of ["login", "overview", "tasks", "tools", "task", "schedules", "webhooks"]) $(section).hidden = section !== id;
  for (const nav of ["overview", "tasks", "tools", "schedules", "webhooks"]) {
    const link = $("nav-" + nav);
    if (nav === id || (nav === "tasks" && id === "task")) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
}

function showLogin() {
  stopPolling();
  showOnly("login");
  $("sign-in-offer").hidden = !signInOffered;
  $("logout").hidden = true;
  $("token").focus();
}

function card(label, value) {
  return el("div", { class: "card" }, el("div", { class: "value", text: String(value) }),
    el("div", { class: "label", text: label }));
}

function bytes(n) {
  if (n === null || n === undefined) return "n/a";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

const SVG = "http://www.w3.org/2000/svg";
function chart(tool, series) {
  const width = 600, height = 120, pad = 4;
  const names = ["created", "completed", "failed"];
  const max = Math.max(1, ...names.flatMap((n) => series[n].map((v) => v || 0)));
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("viewBox", `0 0 ${width} ${height}`);
  svg.setAttribute("preserveAspectRatio", "none");
  svg.setAttribute("role", "img");
  const totals = names.map((n) => `${n} ${series[n].reduce((a, v) => a + (v || 0), 0)}`).join(", ");
  svg.setAttribute("aria-label", `${tool}, last hour: ${totals} (peak ${max} a minute)`);
  // One slot per minute, three thin bars in it (created, completed, failed).
  names.forEach((name, which) => {
    const values = series[name];
    const slot = (width - 2 * pad) / Math.max(1, values.length);
    values.forEach((v, i) => {
      if (!v) return;
      const bar = document.createElementNS(SVG, "rect");
      const h = (v / max) * (height - 2 * pad);
      bar.setAttribute("x", (pad + i * slot + which * slot / 3).toFixed(1));
      bar.setAttribute("y", (height - pad - h).toFixed(1));
      bar.setAttribute("width", Math.max(1, slot / 3 - 0.5).toFixed(1));
      bar.setAttribute("height", h.toFixed(1));
      bar.setAttribute("class", "s-" + name);
      svg.append(bar);
    });
  });
  const legend = el("div", { class: "legend" },
    ...names.map((n) => el("span", { class: "s-" + n, text: "■ " + n })));
  return el("figure", { class: "chart" }, el("figcaption", { text: `${tool} (peak ${max}/min)` }), svg, legend);
}

let identitiesAt = 0;

async function loadOverview() {
  const o = await api("api/overview");
  $("cards").replaceChildren(
    card("queue depth", o.queueDepth),
    card("oldest ready job", o.oldestReadyAgeSeconds.toFixed(1) + " s"),
    card("workers busy", `${o.workers.busy} / ${o.workers.threads ?? "?"}`),
    card("open subscriptions", o.openSubscriptions),
    card("WAL size", bytes(o.walBytes)));
  $("statuses").replaceChildren(...Object.entries(o.tasksByStatus).map(([s, n]) => card(s, n)));
  const sum = (series) => ["created", "completed", "failed"]
    .reduce((total, name) => total + series[name].reduce((a, v) => a + (v || 0), 0), 0);
  const tools = Object.entries(o.perMinute.tools || {});
  const active = tools.filter(([, series]) => sum(series) > 0);
  const idle = tools.length - active.length;
  $("charts").replaceChildren(...active.map(([t, s]) => chart(t, s)),
    ...(idle ? [el("p", { text: `${idle} tool(s) without tasks in the last hour.` })] : []));
  $("upstreams").hidden = o.upstreams.length === 0;
  // Bucket bounds: "≤ 0.05 s" reads as what it is, an upper bound.
  const bound = (s) => (s === null ? "> 1 h" : `≤ ${s} s`);
  const latency = (l) => (l.count === 0 ? "" : `${bound(l.p50)} / ${bound(l.p95)}`);
  $("upstream-rows").replaceChildren(...o.upstreams.map((u) => el("tr", {},
    el("td", { text: u.name }), el("td", { text: u.state.replace("_", " ") }),
    el("td", { text: String(u.tools) }), el("td", { text: String(u.calls) }),
    el("td", { text: String(u.errors) }), el("td", { text: latency(u.latency_seconds) }),
    el("td", { text: String(u.restarts) }),
    el("td", { text: u.last_failure ?? "" }))));
  // A pass over the live jobs (and the last hour's counts) on the server: every 5 s,
  // not with each second's poll; identities' backlogs change slowly.
  if (Date.now() - identitiesAt < 5000) return;
  identitiesAt = Date.now();
  const { identities } = await api("api/identities");
  const refusals = (counts) => Object.entries(counts).filter(([, n]) => n > 0)
    .map(([quota, n]) => `${quota} ${n}`).join(", ") || "none";
  $("identity-rows").replaceChildren(...identities.map((i) => el("tr", {},
    el("td", { text: i.tenant ?? "" }), el("td", { text: i.principal ?? "?" }),
    el("td", { text: String(i.queued) }), el("td", { text: String(i.running) }),
    el("td", { text: String(i.waiting) }), el("td", { text: refusals(i.refusals) }))));
}

// The filter of the task list: status, tool, principal, and since (Unix ms) when set.
function currentFilter() {
  const filter = {};
  for (const name of ["status", "tool", "principal"]) {
    const value = $("f-" + name).value.trim();
    if (value) filter[name] = value;
  }
  const since = $("f-since").value;
  if (since) filter.since = Date.now() - Number(since);
  return filter;
}

function filterQuery() {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(currentFilter())) params.set(name, String(value));
  if (cursor) params.set("before", cursor);
  params.set("limit", "25");
  return params.toString();
}

async function loadTasks() {
  const page = await api("api/tasks?" + filterQuery());
  nextCursor = page.next;
  $("next-page").disabled = !nextCursor;
  $("first-page").disabled = !cursor;
  const rows = page.tasks.map((t) => {
    const link = el("a", { href: "#task/" + encodeURIComponent(t.id), text: t.id });
    // A task past its TTL: only its history summary is left.
    return el("tr", t.history ? { class: "history" } : {},
      el("td", { class: "id" }, link),
      el("td", { class: "status-" + t.status, text: t.history ? `${t.status} (history)` : t.status }),
      el("td", { text: t.tool }),
      el("td", { text: t.principal }),
      el("td", { text: new Date(t.createdAt).toLocaleString() }));
  });
  // A page stops after examining a bounded number of tasks (page.partial): fewer rows,
  // and "Older" continues the search.
  if (page.partial) {
    rows.push(el("tr", {}, el("td", { colspan: "5",
      text: "Searched this far without filling the page: Older searches further back." })));
  }
  $("task-rows").replaceChildren(...(rows.length ? rows :
    [el("tr", {}, el("td", { colspan: "5", text: "No tasks match." }))]));
}

function pretty(value) {
  return value === null || value === undefined ? "—" : JSON.stringify(value, null, 2);
}

async function loadTask() {
  const t = await api("api/tasks/" + encodeURIComponent(currentTask));
  $("task-title").textContent = (t.history ? "Task (history) " : "Task ") + t.id;
  const facts = [["Status", t.status], ["Tool", t.tool], ["Principal", t.principal],
    ["Tenant", t.tenant || "—"], ["Re-run of", t.rerunOf || "—"], ["Created", t.createdAt],
    ["Updated", t.updatedAt], ["Status message", t.statusMessage || "—"],
    ["Schedule", t.schedule ? `${t.schedule.name}, slot of ${t.schedule.slot}` : "—"]];
  if (t.history) {
    // Past its TTL the task is gone; its summary is kept for the operator.
    facts.push(["Removed", `${t.removedAt} (past its time to live)`],
      ["Summary kept until", t.keptUntil], ["Attempts", String(t.attemptCount)],
      ["Arguments kept", t.argumentsKept ? "yes" : "no"]);
  } else {
    facts.push(["Expires", t.expiresAt || "—"], ["Cancel requested", t.cancelRequested ? "yes" : "no"]);
  }
  if (t.job) {
    facts.push(["Job", `${t.job.state}, attempt ${t.job.attempt} of ${t.job.maxAttempts}, ` +
      `runs after ${t.job.runAfter}` + (t.job.lastError ? `, last error: ${t.job.lastError}` : "")]);
  }
  facts.push(["Trace", t.traceId || "—"]);
  $("task-facts").replaceChildren(...facts.flatMap(([k, v]) =>
    [el("dt", { text: k }), el("dd", { id: "fact-" + k.toLowerCase().replace(/ /g, "-"), text: String(v) })]));
  // The trace id links to the configured trace viewer (Jaeger, Tempo).
  if (t.traceId && traceUrl) {
    const href = traceUrl.split("{trace_id}").join(encodeURIComponent(t.traceId));
    $("fact-trace").replaceChildren(el("a", { href, target: "_blank", rel: "noopener", text: t.traceId }));
  }
  if (t.rerunOf) {
    $("fact-re-run-of").replaceChildren(el("a", { href: "#task/" + encodeURIComponent(t.rerunOf), text: t.rerunOf }));
  }
  const terminal = ["completed", "failed", "cancelled"].includes(t.status);
  $("cancel-task").disabled = terminal;
  $("rerun-task").disabled = Boolean(t.history && !t.argumentsKept);
  if (t.history && tail && tail.task === t.id && !tail.done) {
    tail.done = true;
    $("task-output").replaceChildren();
    $("output-state").textContent = "The task is past its time to live: its output went with it.";
  }
  // A later attempt after one that never ended means that one's lease was reclaimed;
  // the gap between an attempt's end and the next start is the retry backoff.
  const list = t.attempts || [];
  const attempts = list.map((a, i) => {
    const next = list[i + 1];
    let text = `Attempt ${a.attempt}: started ${a.startedAt}`;
    if (a.endedAt) text += `, ended ${a.endedAt}: ${a.outcome}`;
    else text += next ? ", lease lost (reclaimed)" : ", running";
    const previous = list[i - 1];
    if (previous && previous.endedAt) {
      const wait = (Date.parse(a.startedAt) - Date.parse(previous.endedAt)) / 1000;
      text += ` (after a ${wait.toFixed(1)} s backoff)`;
    }
    return el("li", { text });
  });
  $("timeline").replaceChildren(...(attempts.length ? attempts : [el("li", { text: "No attempts yet." })]));
  $("task-error").textContent = pretty(t.error);
  const requests = t.inputRequests;
  const answered = t.inputResponses && typeof t.inputResponses === "object" ? Object.keys(t.inputResponses) : [];
  $("task-inputs").textContent = requests ? pretty(requests) + "\nanswered keys: " + (answered.join(", ") || "none") : "—";
  $("task-arguments").textContent = pretty(t.arguments);
  $("task-result").textContent = pretty(t.result);
}

// The task page's live tail: the task's kept output, then the lines after the last one
// read (?after=N) with each tick until the task has ended and everything is read. Lines
// are appended, never re-rendered; text goes in as textContent only (output is
// untrusted); lines the server no longer keeps (before its `first`, the task's cap
// keeping the newest) leave the page too, so it never holds more than the task keeps.
const STREAMS = { stdout: "out", stderr: "err", status: "status", log: "log" };
let tail = null; // { task, after, lastAttempt, done, busy }

function resetTail(task) {
  tail = { task, after: 0, lastAttempt: null, done: false, busy: false };
  $("task-output").replaceChildren();
  $("output-dropped").hidden = true;
  $("output-state").textContent = "Reading the output…";
}

function outputLine(line) {
  const stream = STREAMS[line.stream] || line.stream;
  return el("div", { class: "line out-" + line.stream, "data-position": String(line.position),
    title: `attempt ${line.attempt}, ${line.stream}, ${line.at}` },
  el("span", { class: "gutter", text: `#${line.attempt} ${stream}` }),
  el("span", { class: "text", text: line.text }));
}

function applyOutput(mine, page) {
  const box = $("task-output");
  // Following the end unless the reader scrolled up.
  const pinned = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
  const gone = (position) => page.first === null || position < page.first;
  for (let node = box.firstElementChild; node; node = box.firstElementChild) {
    const separator = node.classList.contains("attempt-separator");
    if (!separator && !gone(Number(node.dataset.position))) break;
    node.remove();
  }
  if (!box.firstElementChild) mine.lastAttempt = null;
  const added = document.createDocumentFragment();
  for (const line of page.lines) {
    if (line.position <= mine.after || gone(line.position)) continue;
    if (mine.lastAttempt !== null && line.attempt !== mine.lastAttempt) {
      added.append(el("div", { class: "attempt-separator", text: `attempt ${line.attempt}` }));
    }
    mine.lastAttempt = line.attempt;
    mine.after = line.position;
    added.append(outputLine(line));
  }
  box.append(added);
  mine.after = Math.max(mine.after, page.next);
  if (pinned) box.scrollTop = box.scrollHeight;
  const dropped = $("output-dropped");
  dropped.hidden = !page.dropped;
  dropped.textContent = page.dropped ? `${page.dropped} earlier line${page.dropped === 1 ? " was" : "s were"} ` +
    "dropped to keep this task's output within its cap; the newest are kept." : "";
  mine.done = page.final;
  const any = box.firstElementChild !== null;
  $("output-state").textContent = page.final
    ? (any ? "The task has ended: this is all of its output." : "The task has ended without output.")
    : (any ? `Following: new lines appear while it runs (${page.status}).` : `No output yet (${page.status}).`);
}

async function loadOutput() {
  const mine = tail;
  if (!mine || mine.done || mine.busy) return;
  mine.busy = true;
  try {
    // A few pages at once (a long output, on opening the page); the rest at the next tick.
    for (let pages = 0; pages < 10; pages++) {
      const page = await api(`api/tasks/${encodeURIComponent(mine.task)}/output?after=${mine.after}`);
      if (tail !== mine) return; // another task's page by now
      applyOutput(mine, page);
      if (!page.more) break;
    }
  } finally {
    mine.busy = false;
  }
}

async function act(action, question) {
  if (!currentTask || !window.confirm(question)) return;
  try {
    const outcome = await api(`api/tasks/${encodeURIComponent(currentTask)}/${action}`, { method: "POST", body: "{}" });
    if (action === "rerun" && outcome.id) {
      notice("Re-run as a new task " + outcome.id);
      location.hash = "#task/" + encodeURIComponent(outcome.id);
    } else {
      notice("Cancel: " + outcome.map((o) => o.outcome).join(", "));
      await loadTask();
    }
  } catch (error) { notice("Failed: " + error.message); }
}

// The webhooks (their deliveries counted) and the newest deliveries, with a button
// that sends a webhook's dead deliveries again.
async function loadWebhooks() {
  const state = $("wh-state").value;
  const o = await api("api/webhooks" + (state ? "?state=" + encodeURIComponent(state) : ""));
  $("webhooks-empty").hidden = o.webhooks.length > 0;
  $("webhook-rows").replaceChildren(...o.webhooks.map((w) => {
    const actions = el("td");
    if (w.dead > 0 && w.configured) {
      const button = el("button", { type: "button", text: `Retry ${w.dead} dead` });
      button.addEventListener("click", () => retryWebhook(w.name));
      actions.append(button);
    }
    return el("tr", {},
      el("td", { text: w.name }), el("td", { text: w.configured ? w.url : "(no longer configured)" }),
      el("td", { text: (w.events || []).join(", ") }), el("td", { text: String(w.pending) }),
      el("td", { text: w.oldestPendingAt || "—" }), el("td", { text: String(w.dead) }),
      el("td", { text: String(w.deliveredRecently) }), el("td", { text: w.lastDeliveredAt || "—" }),
      actions);
  }));
  $("delivery-rows").replaceChildren(...o.deliveries.map((d) => el("tr", { class: "delivery-" + d.state },
    el("td", { text: d.at }), el("td", { text: d.webhook }), el("td", { text: d.event }),
    el("td", {}, el("a", { href: "#task/" + encodeURIComponent(d.taskId), text: d.taskId })),
    el("td", { text: d.state }), el("td", { text: String(d.attempts) }),
    el("td", { text: d.nextAttemptAt || "—" }),
    el("td", { text: d.lastError ? (d.lastStatus ? `${d.lastStatus}: ` : "") + d.lastError : "—" }))));
}

async function retryWebhook(name) {
  if (!window.confirm(`Send the dead deliveries of ${name} again?`)) return;
  try {
    const outcome = await api("api/webhooks/" + encodeURIComponent(name) + "/retry", { method: "POST", body: "{}" });
    notice(`${outcome.retried} dead deliveries of ${name} are pending again.`);
  } catch (error) { notice("Failed: " + error.message); }
}

// The schedules in force: each one's next run, its last slot (what became of it, and
// its task, linked), its counts.
async function loadSchedules() {
  const schedules = await api("api/schedules");
  $("schedules-empty").hidden = schedules.length > 0;
  $("schedule-rows").replaceChildren(...schedules.map((s) => {
    const last = s.last;
    const task = last && last.taskId
      ? el("a", { href: "#task/" + encodeURIComponent(last.taskId),
        text: `${last.taskStatus || "expired"}` })
      : "—";
    const c = s.counts;
    return el("tr", {},
      el("td", { text: s.name }), el("td", { text: s.tool }), el("td", { text: s.timing }),
      el("td", { text: s.nextRun || "never" }),
      el("td", { text: last ? `${last.slot} (${last.outcome.replace("_", " ")})` : "none yet" }),
      el("td", {}, task),
      el("td", { text: `${c.created} / ${c.skipped} / ${c.missed} / ${c.refused}` }));
  }));
}

// Cancel or re-run every task the list's filter matches: count them, ask, then act a
// batch at a time (each batch a request of its own), and say what became of them.
const OUTCOMES = {
  cancelled: "cancelled", cancel_requested: "cancellation requested (running)",
  rerun: "re-run as new tasks", no_arguments: "not re-run (arguments not kept past the TTL)",
  tool_gone: "not re-run (tool no longer served)", not_found: "gone meanwhile",
  refused: "not re-run (refused)",
};

async function bulk(action) {
  const verb = action === "cancel" ? "Cancel" : "Re-run";
  const filter = currentFilter();
  const result = $("bulk-result");
  try {
    const params = new URLSearchParams({ action });
    for (const [name, value] of Object.entries(filter)) params.set(name, String(value));
    const counted = await api("api/tasks/count?" + params.toString());
    if (!counted.count) { result.textContent = `${verb}: no task matches this filter.`; return; }
    const what = action === "cancel" ? "unfinished task" : "task";
    const n = (counted.atLeast ? "at least " : "") + counted.count;
    if (!window.confirm(`${verb} ${n} matching ${what}${counted.count === 1 ? "" : "s"}?`)) {
      result.textContent = `${verb}: nothing done.`;
      return;
    }
    const counts = {};
    let done = 0;
    let before = null;
    do {
      const batch = await api("api/tasks/bulk", { method: "POST",
        body: JSON.stringify({ action, ...filter, through: counted.through, before }) });
      for (const task of batch.tasks) counts[task.outcome] = (counts[task.outcome] || 0) + 1;
      done += batch.tasks.length;
      result.textContent = `${verb}: ${done} of ${n}…`;
      before = batch.next;
    } while (before);
    const parts = Object.entries(counts).map(([outcome, count]) =>
      `${count} ${OUTCOMES[outcome] || "already " + outcome}`);
    result.textContent = `${verb}: ${done} task${done === 1 ? "" : "s"}: ${parts.join(", ")}.`;
    await loadTasks();
  } catch (error) {
    if (error.message !== "login required") result.textContent = `${verb} failed: ${error.message}`;
  }
}

// The tools page: each tool's state and flow control, with a pause (and its reason) or
// resume button. A row is rebuilt only when its tool's state changes, so a reason being
// typed is not wiped by the next poll.
const toolRows = new Map(); // name -> { row, signature }

function toolRow(tool) {
  const flow = [];
  if (tool.concurrencyKey) flow.push(`key (≤${tool.maxConcurrencyPerKey} per value)`);
  if (tool.rate) flow.push(`rate ${tool.rate}${tool.ratePerKey ? " per key" : ""}`);
  const state = el("td", {});
  if (tool.paused) {
    state.append(el("span", { class: "paused", text: "Paused" }),
      ` since ${tool.pausedAt}${tool.pauseReason ? ": " + tool.pauseReason : ""}` +
      (tool.served === false ? " (no longer served)" : ""));
  } else {
    state.textContent = "Running";
  }
  const action = el("td", {});
  const box = el("div", { class: "tool-action" });
  if (tool.paused) {
    const button = el("button", { type: "button", class: "resume", text: "Resume" });
    button.addEventListener("click", () => toolAction(tool.name, "resume", {}));
    box.append(button);
  } else {
    const reason = el("input", { type: "text", class: "reason", placeholder: "reason (optional)",
      "aria-label": `Reason to pause ${tool.name}`, maxlength: "500" });
    const button = el("button", { type: "button", class: "pause", text: "Pause" });
    button.addEventListener("click", () => toolAction(tool.name, "pause", { reason: reason.value }));
    box.append(reason, button);
  }
  action.append(box);
  return el("tr", { "data-tool": tool.name }, el("td", { text: tool.name }), state,
    el("td", { text: flow.join(", ") || "—" }), action);
}

async function loadTools() {
  const { tools } = await api("api/tools");
  const body = $("tool-rows");
  const rows = tools.map((tool) => {
    const signature = JSON.stringify([tool.paused, tool.pauseReason, tool.pausedAt, tool.served,
      tool.rate, tool.concurrencyKey]);
    const known = toolRows.get(tool.name);
    if (known && known.signature === signature) return known.row;
    const row = toolRow(tool);
    toolRows.set(tool.name, { row, signature });
    return row;
  });
  // Only when something changed: the rows (and what is typed in them) stay put.
  const same = rows.length === body.children.length && rows.every((row, i) => body.children[i] === row);
  if (!same) body.replaceChildren(...rows);
}

async function toolAction(name, action, body) {
  try {
    await api(`api/tools/${encodeURIComponent(name)}/${action}`, { method: "POST", body: JSON.stringify(body) });
    notice(`${name} ${action === "pause" ? "paused" : "resumed"}.`);
    await loadTools();
  } catch (error) { if (error.message !== "login required") notice("Failed: " + error.message); }
}

function stopPolling() { if (timer) { clearInterval(timer); timer = null; } }

function poll(load) {
  stopPolling();
  const tick = () => load().catch((error) => { if (error.message !== "login required") notice(error.message); });
  tick();
  // At most once a second, and not while the tab is hidden.
  timer = setInterval(() => { if (!document.hidden) tick(); }, 1000);
}

function route() {
  const hash = location.hash || "#overview";
  $("logout").hidden = false;
  if (hash.startsWith("#task/")) {
    currentTask = decodeURIComponent(hash.slice("#task/".length));
    showOnly("task");
    resetTail(currentTask);
    // The task first: a history summary has no output to follow.
    poll(async () => { await loadTask(); await loadOutput(); });
  } else if (hash === "#tasks") {
    showOnly("tasks");
    poll(loadTasks);
  } else if (hash === "#schedules") {
    showOnly("schedules");
    poll(loadSchedules);
  } else if (hash === "#webhooks") {
    showOnly("webhooks");
    poll(loadWebhooks);
  } else if (hash === "#tools") {
    showOnly("tools");
    poll(loadTools);
  } else {
    showOnly("overview");
    poll(loadOverview);
  }
}

async function start() {
  try {
    const session = await api("api/session");
    csrf = session.csrf;
    traceUrl = session.traceUrl || null;
    for (const s of session.statuses) $("f-status").append(el("option", { value: s, text: s }));
    for (const t of session.tools) $("f-tool").append(el("option", { value: t, text: t }));
    route();
  } catch (error) {
    if (error.message !== "login required") notice(error.message);
  }
}

$("login-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  try {
    await api("login", { method: "POST", body: JSON.stringify({ token: $("token").value }) });
    $("token").value = "";
    notice("");
    await start();
  } catch (error) { notice("Login refused: " + error.message); }
});
$("logout").addEventListener("click", async () => {
  await api("logout", { method: "POST", body: "{}" }).catch(() => {});
  csrf = null;
  showLogin();
});
$("filters").addEventListener("submit", (event) => {
  event.preventDefault();
  const id = $("f-id").value.trim();
  if (id) { location.hash = "#task/" + encodeURIComponent(id); return; }
  cursor = null; pageStack = [];
  $("bulk-result").textContent = "";
  poll(loadTasks);
});
$("next-page").addEventListener("click", () => {
  pageStack.push(cursor); cursor = nextCursor; poll(loadTasks);
});
$("first-page").addEventListener("click", () => { cursor = null; pageStack = []; poll(loadTasks); });
$("wh-state").addEventListener("change", () => poll(loadWebhooks));
$("bulk-cancel").addEventListener("click", () => bulk("cancel"));
$("bulk-rerun").addEventListener("click", () => bulk("rerun"));
$("cancel-task").addEventListener("click", () => act("cancel", "Cancel this task?"));
$("rerun-task").addEventListener("click", () => act("rerun", "Run this task again as a new task?"));
window.addEventListener("hashchange", () => { notice(""); route(); });
start();
