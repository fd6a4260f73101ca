// The dashboard in a real browser: headless Chromium driven over the DevTools protocol
// (a tiny client on Node's built-in WebSocket), against the given mcp-taskd binary.
//
//   node dashboard.mjs BINARY OUTDIR
//
// Checks that a non-admin token is refused at the login form, that an admin logs in and
// sees the overview, that tasks created through MCP appear in the task table within 2 s
// without a reload, that a task is cancelled with its button (confirm dialog accepted),
// and that a running command's task page tails its output live (tests/scripts/chatty.py:
// a line shows while it runs, its last lines once it ends, appended, never as markup,
// within its cap), that the webhooks view shows a receiver's failures, a dead delivery,
// and sends it again with its button, that a tool is paused with a reason and resumed
// from the tools page, that a filtered list is cancelled and re-run in bulk (a
// confirmation naming the count, the outcome shown, each rerun linked to its original),
// and that a failed task past its TTL is listed by its history summary. Saves
// overview.png, tasks.png, task.png, task-output.png, webhooks.png, tools.png, bulk.png,
// history.png and tasks-phone.png in OUTDIR. Exits non-zero on the first failed check.
//
// With MCP_TASKD_IDP (tests/interop/oauth_idp.mjs, where oauth2-mock-server is installed)
// the server also names that real authorization server in [auth.oauth] with a client_id,
// and the last step logs out and signs in there instead (OpenID Connect, the admin role
// from the ID token), through the login page's link.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { createHash } from "node:crypto";
import { mkdtempSync, mkdirSync, writeFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

const [binary, outDir] = process.argv.slice(2);
if (!binary || !outDir) { console.error("usage: node dashboard.mjs BINARY OUTDIR"); process.exit(2); }
mkdirSync(outDir, { recursive: true });
const work = mkdtempSync(join(tmpdir(), "mcp-taskd-browser-"));
const children = [];
const sha256 = (text) => createHash("sha256").update(text).digest("hex");
const ADMIN = "browser-admin-token";
const ALICE = "browser-alice-token";

function fail(message) {
  console.error("FAIL: " + message);
  cleanup();
  process.exit(1);
}
function cleanup() {
  for (const child of children) { try { child.kill("SIGKILL"); } catch (_) { /* gone */ } }
  try { rmSync(work, { recursive: true, force: true }); } catch (_) { /* best effort */ }
}
process.on("uncaughtException", (error) => fail(error.stack || String(error)));
process.on("unhandledRejection", (error) => fail(error && error.stack || String(error)));

/// Starts `command`; resolves with the first match of `pattern` on the chosen stream.
/// `stdin` "pipe" keeps a child that stops when its stdin closes running.
function startAndMatch(command, args, stream, pattern, limitMs, { stdin = "ignore", env } = {}) {
  const child = spawn(command, args, { stdio: [stdin, "pipe", "pipe"], env: env ?? process.env });
  children.push(child);
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${command}: no ${pattern} in ${limitMs} ms`)), limitMs);
    createInterface({ input: child[stream] }).on("line", (line) => {
      const match = line.match(pattern);
      if (match) { clearTimeout(timer); resolve(match); }
    });
    child[stream === "stdout" ? "stderr" : "stdout"].resume();
    child.on("exit", (code) => reject(new Error(`${command} exited (${code})`)));
  });
}

// ---- the authorization server, when there is one
let signIn = "";
if (process.env.MCP_TASKD_IDP) {
  const [, issuer] = await startAndMatch(process.env.MCP_TASKD_NODE ?? process.execPath,
    [process.env.MCP_TASKD_IDP], "stdout", /^ISSUER (\S+)/, 20000,
    { stdin: "pipe", env: { ...process.env, ID_TOKEN_CLAIMS: JSON.stringify({ roles: ["admin"] }) } });
  signIn = `[auth.oauth]\nissuer = "${issuer}"\nclient_id = "mcp-taskd-dashboard"\nroles_claim = "roles"\n`;
}

// ---- a webhook receiver: it answers 500 (with markup in nothing it sends) until told
// otherwise, so that deliveries fail, go dead (retry_for = "2s") and are sent again.
let receiverFails = true;
let received = 0;
const receiver = createServer((request, response) => {
  request.resume();
  request.on("end", () => {
    if (receiverFails) { response.writeHead(500).end(); return; }
    received++;
    response.writeHead(204).end();
  });
});
await new Promise((resolve) => receiver.listen(0, "127.0.0.1", resolve));
writeFileSync(join(work, "hook.secret"), "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw\n");
const webhook = `[[webhooks]]
name = "browser"
url = "http://127.0.0.1:${receiver.address().port}/hook"
events = ["task.completed"]
secret_file = ${JSON.stringify(join(work, "hook.secret"))}
allow_http = ["127.0.0.1"]
retry_for = "2s"
`;

// ---- the server, with a command tool that prints (and one that keeps 1,000 bytes of it)
const chatty = fileURLToPath(new URL("../scripts/chatty.py", import.meta.url));
const chattyTool = (name, extra) => `[[tools]]
name = "${name}"
description = "prints"
command = ["python3", ${JSON.stringify(chatty)}]
env = { WORK = ${JSON.stringify(work)} }
backoff_ms = 50
${extra}
`;
writeFileSync(join(work, "config.toml"), `${signIn}
[builtin]
sets = ["conformance"]
[workers]
# The slow tasks of steps 2 and 3 keep two busy while the command tool runs.
threads = 4
# Tasks past their TTL leave their history summaries within a fraction of a second.
janitor_interval_ms = 200
[[auth.tokens]]
principal = "ops"
roles = ["admin"]
sha256 = "${sha256(ADMIN)}"
[[auth.tokens]]
principal = "alice"
sha256 = "${sha256(ALICE)}"
${chattyTool("chatty", "")}
${chattyTool("chatty_capped", "output_max_bytes = 1000")}
${chattyTool("chatty_brief", "ttl_ms = 1000\nmax_attempts = 1")}
${webhook}`);
const [, address] = await startAndMatch(binary, ["serve", "--config", join(work, "config.toml"),
  "--listen", "127.0.0.1:0", "--data-dir", join(work, "data")], "stdout",
  /listening on http:\/\/([^/]+)\/mcp/, 20000);
const origin = `http://${address}`;
const dashboard = `${origin}/dashboard/`;

let rpcId = 0;
async function createTask(seconds, name = "slow_compute", args = { seconds }) {
  const version = "2026-07-28";
  const body = { jsonrpc: "2.0", id: ++rpcId, method: "tools/call", params: {
    name, arguments: args, _meta: {
      "io.modelcontextprotocol/protocolVersion": version,
      "io.modelcontextprotocol/clientCapabilities": { extensions: { "io.modelcontextprotocol/tasks": {} } } } } };
  const response = await fetch(`${origin}/mcp`, { method: "POST", body: JSON.stringify(body), headers: {
    "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
    "MCP-Protocol-Version": version, "Mcp-Method": "tools/call", "Mcp-Name": name,
    "Authorization": `Bearer ${ALICE}` } });
  const answer = await response.json();
  const id = answer.result && answer.result.taskId;
  if (!id) fail("tools/call did not create a task: " + JSON.stringify(answer));
  return id;
}

// ---- the browser and a minimal DevTools protocol client
const [, devtools] = await startAndMatch("chromium", ["--headless", "--no-sandbox", "--disable-gpu",
  "--no-first-run", "--no-default-browser-check", "--remote-debugging-port=0",
  `--user-data-dir=${join(work, "profile")}`, "--window-size=1280,900", "about:blank"], "stderr",
  /DevTools listening on (ws:\/\/\S+)/, 30000);
const socket = new WebSocket(devtools);
await new Promise((resolve, reject) => { socket.onopen = resolve; socket.onerror = reject; });
let nextId = 0;
const pending = new Map();
const listeners = [];
socket.onmessage = (event) => {
  const message = JSON.parse(event.data);
  if (message.id && pending.has(message.id)) {
    const { resolve, reject } = pending.get(message.id);
    pending.delete(message.id);
    if (message.error) reject(new Error(JSON.stringify(message.error))); else resolve(message.result);
  } else if (message.method) {
    for (const listener of listeners) listener(message);
  }
};
function send(method, params = {}, sessionId) {
  const id = ++nextId;
  socket.send(JSON.stringify({ id, method, params, sessionId }));
  return new Promise((resolve, reject) => pending.set(id, { resolve, reject }));
}
const { targetId } = await send("Target.createTarget", { url: "about:blank" });
const { sessionId } = await send("Target.attachToTarget", { targetId, flatten: true });
const page = (method, params) => send(method, params, sessionId);
await page("Page.enable");
await page("Runtime.enable");
let dialogs = 0;
let lastDialog = "";
listeners.push((message) => {
  if (message.method === "Page.javascriptDialogOpening" && message.sessionId === sessionId) {
    dialogs++;
    lastDialog = message.params.message;
    page("Page.handleJavaScriptDialog", { accept: true });
  }
});

async function evaluate(expression) {
  const { result, exceptionDetails } = await page("Runtime.evaluate",
    { expression, awaitPromise: true, returnByValue: true });
  if (exceptionDetails) throw new Error(`${expression}: ${JSON.stringify(exceptionDetails)}`);
  return result.value;
}
async function waitFor(expression, limitMs, what) {
  const deadline = Date.now() + limitMs;
  for (;;) {
    // The document may still be loading: an exception is "not yet".
    if (await evaluate(expression).catch(() => false)) return Date.now();
    if (Date.now() > deadline) fail(`${what} (not within ${limitMs} ms)`);
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
async function screenshot(name) {
  const { data } = await page("Page.captureScreenshot", { format: "png", captureBeyondViewport: true });
  writeFileSync(join(outDir, name), Buffer.from(data, "base64"));
}
async function navigate(url) {
  await page("Page.navigate", { url });
}
async function typeToken(token) {
  await evaluate(`(() => { const input = document.getElementById("token"); input.value = ${JSON.stringify(token)};
    document.getElementById("login-form").requestSubmit(); return true; })()`);
}

// 1. A token without the admin role is refused at the login form.
await navigate(dashboard);
await waitFor(`!document.getElementById("login").hidden`, 10000, "the login form shows");
await typeToken(ALICE);
await waitFor(`document.getElementById("notice").textContent.includes("no admin role")`, 5000,
  "a non-admin token is refused");
const cookies = await page("Network.getCookies", { urls: [dashboard] }).catch(() => ({ cookies: [] }));
if (cookies.cookies && cookies.cookies.length) fail("a non-admin token got a session cookie");
console.log("ok: a non-admin token is refused");

// 2. An admin logs in and sees the overview.
await typeToken(ADMIN);
await waitFor(`!document.getElementById("overview").hidden &&
  document.querySelectorAll("#cards .card").length >= 5`, 10000, "the overview shows");
const warmup = await createTask(0);
await waitFor(`[...document.querySelectorAll("#statuses .card")].some((c) =>
  c.textContent.includes("completed") && Number(c.querySelector(".value").textContent) >= 1)`, 10000,
  "a completed task is counted live");
console.log(`ok: overview; task ${warmup.slice(0, 8)}… counted completed without a reload`);
const unfinished = await createTask(10);
await waitFor(`[...document.querySelectorAll("#identity-rows tr")].some((row) =>
  row.textContent.includes("alice"))`, 9000, "the identities table lists alice's unfinished task");
console.log(`ok: the identities table lists alice while task ${unfinished.slice(0, 8)}… is unfinished`);

// 3. Tasks created through MCP appear in the table within 2 s, without a reload.
await evaluate(`location.hash = "#tasks"; true`);
await waitFor(`!document.getElementById("tasks").hidden`, 5000, "the task list shows");
await evaluate(`window.__sameDocument = true`);
const created = [];
for (let i = 0; i < 3; i++) created.push(await createTask(30));
const start = Date.now();
await waitFor(`${JSON.stringify(created)}.every((id) => document.getElementById("task-rows").textContent.includes(id))`,
  2000, "the new tasks appear in the table");
if (!(await evaluate(`window.__sameDocument === true`))) fail("the page reloaded");
console.log(`ok: ${created.length} new tasks in the table after ${Date.now() - start} ms, no reload`);
await screenshot("tasks.png");

// 4. Open a task, cancel it with the button (confirm accepted), see it cancelled.
const target = created[0];
await evaluate(`document.querySelector('a[href="#task/${target}"]').click(); true`);
await waitFor(`document.getElementById("fact-status")?.textContent === "working"`, 5000, "the task opens");
const dialogsBefore = dialogs;
await evaluate(`document.getElementById("cancel-task").click(); true`);
await waitFor(`document.getElementById("fact-status")?.textContent === "cancelled"`, 10000,
  "the task shows cancelled");
if (dialogs !== dialogsBefore + 1) fail("cancelling did not ask for confirmation");
await screenshot("task.png");
console.log("ok: cancelled from the task page after a confirmation");

// 5. A running command's output, tailed live on its task page. Its first attempt prints
// two lines and fails; the second prints a line of markup and 40 steps, then waits for
// $WORK/go before its last lines.
const tailed = await createTask(0, "chatty", { mode: "tail", count: 40 });
await evaluate(`location.hash = "#task/${tailed}"; true`);
const lineTexts = `[...document.querySelectorAll("#task-output .line .text")].map((n) => n.textContent)`;
await waitFor(`document.getElementById("fact-status")?.textContent === "working" &&
  ${lineTexts}.includes("step 040 of the build")`, 20000, "a running task's printed lines show on its page");
const shown = await evaluate(`(() => {
  const box = document.getElementById("task-output");
  const separators = [...box.querySelectorAll(".attempt-separator")].map((n) => n.textContent);
  const first = box.querySelector(".line");
  first.__original = true; // re-rendering would lose this
  return { texts: ${lineTexts}, separators, gutter: first.querySelector(".gutter").textContent,
    images: box.querySelectorAll("img").length, title: document.title,
    pinned: box.scrollHeight - box.scrollTop - box.clientHeight < 8,
    overflows: box.scrollHeight > box.clientHeight + 20,
    state: document.getElementById("output-state").textContent };
})()`);
if (shown.texts[0] !== "fetching sources (attempt 1)") fail("the output starts elsewhere: " + JSON.stringify(shown.texts));
if (shown.separators.join() !== "attempt 2") fail("no separator where attempt 2 begins: " + JSON.stringify(shown.separators));
if (shown.gutter !== "#1 err") fail("the stream and attempt are not shown: " + shown.gutter);
if (!shown.texts.includes(`<img src=x onerror="document.title='injected'"> stays text`) || shown.images !== 0 ||
  shown.title.includes("injected")) fail("output text was read as markup");
if (!shown.overflows || !shown.pinned) fail(`the output does not follow its end (${JSON.stringify(shown)})`);
if (!shown.state.startsWith("Following")) fail("the state says: " + shown.state);
console.log(`ok: task ${tailed.slice(0, 8)}…'s ${shown.texts.length} lines show while it runs, attempt 2 set apart`);
// Scrolled up, the reader stays where they are while the last lines arrive.
await evaluate(`document.getElementById("task-output").scrollTop = 0; true`);
writeFileSync(join(work, "go"), "");
await waitFor(`document.getElementById("fact-status")?.textContent === "completed" &&
  ${lineTexts}.includes("build finished") &&
  document.getElementById("output-state").textContent.startsWith("The task has ended")`, 10000,
  "the last lines show once the task has completed");
const ended = await evaluate(`(() => {
  const box = document.getElementById("task-output");
  return { texts: ${lineTexts}, top: box.scrollTop, original: box.querySelector(".line").__original === true };
})()`);
if (ended.top !== 0) fail(`the output scrolled away from where the reader was (${ended.top})`);
if (!ended.original) fail("the lines were rendered again instead of appended");
const tailEnd = ["finishing 001", "finishing 002", "finishing 003", "build finished"];
if (ended.texts.slice(-4).join() !== tailEnd.join() || ended.texts.length !== shown.texts.length + 4) {
  fail("the last lines are not each shown once at the end: " + JSON.stringify(ended.texts.slice(-6)));
}
// Everything is read: the tail stops asking (the task itself is still polled).
await evaluate(`performance.clearResourceTimings(); true`);
await new Promise((resolve) => setTimeout(resolve, 2500));
const asked = await evaluate(`(() => {
  const names = performance.getEntriesByType("resource").map((entry) => entry.name);
  return { output: names.filter((name) => name.includes("/output")).length,
    task: names.filter((name) => name.includes("api/tasks/")).length };
})()`);
if (asked.output !== 0 || asked.task === 0) fail(`after the end the tail still polls: ${JSON.stringify(asked)}`);
// Scrolled to its start: the first attempt's lines, where the second begins, the markup.
await screenshot("task-output.png");
console.log("ok: the last lines are appended once the task completes; the tail then stops polling");
// A task over its cap: only the kept (newest) lines, and a note of the dropped ones.
const capped = await createTask(0, "chatty_capped", { mode: "lines", count: 400, width: 50 });
await evaluate(`location.hash = "#task/${capped}"; true`);
await waitFor(`document.getElementById("output-state").textContent.startsWith("The task has ended") &&
  ${lineTexts}.length === 20 && ${lineTexts}[19].startsWith("line 000400 ") &&
  document.getElementById("output-dropped").textContent.startsWith("380 earlier lines were dropped")`, 15000,
  "a task over its cap shows its 20 kept lines and says 380 were dropped");
console.log("ok: a task over its output cap shows only its kept lines and the count dropped");

// 5b. The tools page: pause slow_compute with a reason (a new task of it waits), see the
// pause shown, resume it (the task runs).
await evaluate(`location.hash = "#tools"; true`);
const toolRow = `document.querySelector('#tool-rows tr[data-tool="slow_compute"]')`;
await waitFor(`${toolRow} && ${toolRow}.querySelector("button.pause")`, 5000, "the tools page lists slow_compute");
await evaluate(`(() => { ${toolRow}.querySelector("input.reason").value = "maintenance window";
  ${toolRow}.querySelector("button.pause").click(); return true; })()`);
await waitFor(`${toolRow}.textContent.includes("Paused") && ${toolRow}.textContent.includes("maintenance window") &&
  ${toolRow}.querySelector("button.resume")`, 5000, "the tool shows paused, with its reason");
await screenshot("tools.png");
const held = await createTask(0);
await new Promise((resolve) => setTimeout(resolve, 1500));
const heldState = await (await fetch(`${dashboard}api/tasks/${held}`, { headers: { Authorization: `Bearer ${ADMIN}` } })).json();
if (heldState.status !== "working" || (heldState.attempts || []).length !== 0) {
  fail("a task of the paused tool ran: " + JSON.stringify(heldState));
}
await evaluate(`${toolRow}.querySelector("button.resume").click(); true`);
await waitFor(`${toolRow}.textContent.includes("Running") && ${toolRow}.querySelector("button.pause")`, 5000,
  "the tool shows running again");
await evaluate(`location.hash = "#task/${held}"; true`);
await waitFor(`document.getElementById("fact-status")?.textContent === "completed"`, 10000,
  "the held task runs once the tool is resumed");
console.log("ok: a tool paused with a reason from the tools page holds its task, and resumed runs it");

// 5c. Bulk actions on the filtered list: re-run three failed tasks of one tool (each new
// task linked to its original), then cancel every unfinished slow_compute task (two
// new ones at least).
const brokenIds = [];
for (let i = 0; i < 3; i++) brokenIds.push(await createTask(0, "chatty", { mode: "fail" }));
await evaluate(`location.hash = "#tasks"; true`);
await waitFor(`!document.getElementById("tasks").hidden`, 5000, "the task list shows");
async function filterBy(status, tool) {
  await evaluate(`(() => { document.getElementById("f-status").value = ${JSON.stringify(status)};
    document.getElementById("f-tool").value = ${JSON.stringify(tool)};
    document.getElementById("filters").requestSubmit(); return true; })()`);
}
await filterBy("failed", "chatty");
// Each listed as failed (their attempts take a moment), and nothing else.
await waitFor(`(() => {
  const rows = [...document.querySelectorAll("#task-rows tr")].map((row) => row.textContent);
  return rows.length === 3 && ${JSON.stringify(brokenIds)}.every((id) =>
    rows.some((row) => row.includes(id) && row.includes("failed")));
})()`, 15000, "the failed tasks are listed");
const dialogsBeforeBulk = dialogs;
await evaluate(`document.getElementById("bulk-rerun").click(); true`);
await waitFor(`document.getElementById("bulk-result").textContent.startsWith("Re-run: 3 tasks: 3 re-run")`, 10000,
  "the bulk rerun says what it did");
if (dialogs !== dialogsBeforeBulk + 1 || !/^Re-run 3 matching tasks\?$/.test(lastDialog)) {
  fail(`the bulk rerun did not confirm the count: ${JSON.stringify(lastDialog)}`);
}
await screenshot("bulk.png");
const rerunOf = await evaluate(`(async () => {
  const page = await (await fetch("api/tasks?tool=chatty&limit=50")).json();
  return page.tasks.filter((t) => t.rerunOf).map((t) => [t.id, t.rerunOf]);
})()`);
if (rerunOf.length !== 3 || !rerunOf.every(([, of]) => brokenIds.includes(of))) {
  fail("the reruns do not link to their originals: " + JSON.stringify(rerunOf));
}
await evaluate(`location.hash = "#task/${rerunOf[0][0]}"; true`);
await waitFor(`document.querySelector('#fact-re-run-of a[href="#task/${rerunOf[0][1]}"]')`, 5000,
  "a rerun's page links to the task it repeats");
await evaluate(`location.hash = "#tasks"; true`);
await waitFor(`!document.getElementById("tasks").hidden`, 5000, "the task list shows");
const busy = [await createTask(60), await createTask(60)];
await filterBy("working", "slow_compute");
await waitFor(`${JSON.stringify(busy)}.every((id) => document.getElementById("task-rows").textContent.includes(id))`,
  5000, "the working tasks are listed");
await evaluate(`document.getElementById("bulk-cancel").click(); true`);
await waitFor(`document.getElementById("bulk-result").textContent.startsWith("Cancel: ")`, 10000,
  "the bulk cancel says what it did");
const cancelCount = /^Cancel (\d+) matching unfinished tasks?\?$/.exec(lastDialog);
const cancelSaid = await evaluate(`document.getElementById("bulk-result").textContent`);
if (!cancelCount || Number(cancelCount[1]) < 2 || !cancelSaid.startsWith(`Cancel: ${cancelCount[1]} task`)) {
  fail(`the bulk cancel's confirmation (${lastDialog}) and result (${cancelSaid}) disagree`);
}
await waitFor(`document.getElementById("task-rows").textContent.includes("No tasks match")`, 10000,
  "no working slow_compute task is left");
console.log(`ok: bulk re-run of 3 failed tasks (linked), bulk cancel of ${cancelCount[1]} after confirmations`);

// 5d. A failed task past its TTL is listed and shown by its history summary.
const brief = await createTask(0, "chatty_brief", { mode: "fail" });
await filterBy("failed", "chatty_brief");
await waitFor(`[...document.querySelectorAll("#task-rows tr.history")].some((row) =>
  row.textContent.includes(${JSON.stringify(brief)}) && row.textContent.includes("failed (history)"))`, 15000,
  "the failed task past its TTL is listed by its summary");
await screenshot("history.png");
await evaluate(`location.hash = "#task/${brief}"; true`);
await waitFor(`document.getElementById("task-title").textContent.startsWith("Task (history)") &&
  document.getElementById("fact-summary-kept-until")?.textContent.length > 0 &&
  document.getElementById("rerun-task").disabled &&
  document.getElementById("output-state").textContent.includes("past its time to live")`, 5000,
  "the summary's page says what is kept");
console.log(`ok: task ${brief.slice(0, 8)}… past its TTL is listed and shown by its history summary`);
await evaluate(`(() => { document.getElementById("f-status").value = "";
  document.getElementById("f-tool").value = ""; return true; })()`);

// 6. Back on the overview, the chart of the tool counts the tasks created (the history
// is sampled every 5 s).
await evaluate(`location.hash = "#overview"; true`);
await waitFor(`[...document.querySelectorAll("#charts svg")].some((svg) =>
  /slow_compute, last hour: created ([4-9]|\\d\\d)/.test(svg.getAttribute("aria-label")))`, 12000,
  "the per-minute chart counts the created tasks");
await screenshot("overview.png");
console.log("ok: the per-minute chart shows the tasks created");

// 7. The webhooks view: the receiver answered 500, so the completed tasks' deliveries
// are dead (after 2 s); its button sends them again, and they arrive.
await evaluate(`location.hash = "#webhooks"; true`);
await waitFor(`!document.getElementById("webhooks").hidden &&
  [...document.querySelectorAll("#webhook-rows tr")].some((row) => row.textContent.includes("browser") &&
    row.querySelector("button")?.textContent.startsWith("Retry"))`, 15000,
  "the webhooks view shows dead deliveries with a retry button");
await waitFor(`[...document.querySelectorAll("#delivery-rows tr")].some((row) =>
  row.textContent.includes("dead") && row.textContent.includes("500"))`, 5000,
  "the deliveries show why they failed (500)");
await screenshot("webhooks.png");
receiverFails = false;
const dialogsBeforeRetry = dialogs;
await evaluate(`document.querySelector("#webhook-rows button").click(); true`);
await waitFor(`document.getElementById("notice").textContent.includes("pending again")`, 5000,
  "the retry is acknowledged");
if (dialogs !== dialogsBeforeRetry + 1) fail("retrying did not ask for confirmation");
const deadline = Date.now() + 15000;
while (received === 0 && Date.now() < deadline) await new Promise((resolve) => setTimeout(resolve, 50));
if (received === 0) fail("the retried deliveries did not arrive");
await waitFor(`[...document.querySelectorAll("#delivery-rows tr")].some((row) => row.textContent.includes("delivered"))`,
  5000, "a delivered delivery shows");
console.log(`ok: the webhooks view shows dead deliveries; its button sent them again (${received} arrived)`);

// 8. At a phone's width the task list stays readable (no page-wide horizontal scroll).
await page("Emulation.setDeviceMetricsOverride", { width: 390, height: 844, deviceScaleFactor: 2, mobile: true });
await evaluate(`location.hash = "#tasks"; true`);
await waitFor(`!document.getElementById("tasks").hidden &&
  document.getElementById("task-rows").textContent.includes(${JSON.stringify(target)})`, 5000, "the list at phone width");
const overflow = await evaluate(`document.documentElement.scrollWidth - document.documentElement.clientWidth`);
if (overflow > 1) fail(`the page scrolls sideways at phone width (${overflow} px)`);
await screenshot("tasks-phone.png");
await page("Emulation.clearDeviceMetricsOverride");
console.log("ok: readable at a phone's width");

// 9. The API still refuses the non-admin token directly.
const refused = await fetch(`${dashboard}api/overview`, { headers: { Authorization: `Bearer ${ALICE}` } });
if (refused.status !== 403) fail(`non-admin token on the API: ${refused.status}`);
console.log("ok: the API refuses a non-admin token (403)");

// 10. Sign in at the identity provider instead: log out, follow the login page's link
// through the provider and back, and see the overview.
if (signIn) {
  await evaluate(`document.getElementById("logout").click(); true`);
  await waitFor(`!document.getElementById("login").hidden &&
    !document.getElementById("sign-in-offer").hidden`, 5000, "the login page offers the sign-in");
  await evaluate(`document.getElementById("sign-in").click(); true`);
  await waitFor(`location.pathname === "/dashboard/" && !document.getElementById("overview").hidden &&
    document.querySelectorAll("#cards .card").length >= 5`, 15000,
    "back from the provider, signed in, the overview shows");
  console.log("ok: signed in at the identity provider (oauth2-mock-server) and back");
}

console.log(`PASS: dashboard in Chromium; screenshots in ${outDir}`);
socket.close();
receiver.close();
cleanup();
process.exit(0);
