// The parked-message console: plain DOM over the JSON API under /api/. Message content is only
// ever set as text (textContent), never as markup.
"use strict";

const TOKEN_KEY = "worker-host-console-token";
// `limit`: how many of the queue's first messages the page reads (and groups); "Show more" adds,
// up to MAX, the most one listing returns.
const PAGE = 500;
const MAX = 1000;
// `view`: what the main part shows: one queue ("queue"), the failure groups across queues
// ("groups") or search results ("search").
const state = { view: null, queue: null, limit: PAGE, total: null, messages: [], results: new Map(), selected: new Set(),
  upload: null, groups: null, groupResults: new Map(), query: null };

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function notice(text, kind) {
  const box = $("notice");
  box.textContent = text;
  box.className = kind || "";
  box.hidden = !text;
}

function status(text) { $("status").textContent = text; }

async function api(method, path, body, contentType) {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  if (body !== undefined) headers["Content-Type"] = contentType || "application/json";
  let response;
  try {
    response = await fetch(path, { method, headers, body });
  } catch (err) {
    notice("The service did not answer: " + err.message);
    return null;
  }
  const data = await response.json().catch(() => ({}));
  if (response.status === 401) {
    notice("The console needs its token ([admin] token, sent as Authorization: Bearer): enter it with the Token button.");
    askToken();
    return null;
  }
  if (!response.ok) {
    notice((data && data.error) || ("HTTP " + response.status));
    return null;
  }
  return data;
}

function askToken() {
  const dialog = $("token-dialog");
  $("token-input").value = sessionStorage.getItem(TOKEN_KEY) || "";
  if (!dialog.open) dialog.showModal();
}

$("token-dialog").addEventListener("close", () => {
  if ($("token-dialog").returnValue === "save") {
    sessionStorage.setItem(TOKEN_KEY, $("token-input").value);
    notice("Token kept for this tab.", "info");
    refresh();
  }
});
$("token-button").addEventListener("click", askToken);
$("refresh").addEventListener("click", () => refresh());

async function refresh() {
  const data = await api("GET", "/api/failed");
  if (!data) return;
  loadJobs();
  const list = $("queues");
  list.replaceChildren();
  for (const q of data.queues) {
    const button = el("button", { type: "button", "data-queue": q.queue, onclick: () => openQueue(q.queue) },
      el("span", { text: q.queue }), el("span", { class: "count", text: q.count === null ? "missing" : String(q.count) }));
    if (q.queue === state.queue) { button.setAttribute("aria-current", "true"); state.total = q.count; }
    list.append(el("li", {}, button));
  }
  // The view the address names (#groups, #search=TEXT, #queue), else the first queue with
  // parked messages.
  const named = decodeURIComponent(location.hash.slice(1));
  if (state.view === "groups" || (!state.view && named === "groups")) return showGroups();
  if (state.view === "search" || (!state.view && named.startsWith("search="))) {
    const text = state.query ?? named.slice("search=".length);
    $("search-input").value = text;
    return search(text);
  }
  const first = data.queues.find((q) => q.queue === named) || data.queues.find((q) => q.count > 0);
  if (state.queue) await openQueue(state.queue, true);
  else if (first) await openQueue(first.queue);
}

async function openQueue(queue, keepResults) {
  if (queue !== state.queue) state.limit = PAGE;
  state.queue = queue;
  state.view = "queue";
  const listed = [...document.querySelectorAll("nav button")].find((b) => b.dataset.queue === queue);
  if (listed) state.total = Number(listed.querySelector(".count").textContent) || 0;
  history.replaceState(null, "", "#" + encodeURIComponent(queue));
  if (!keepResults) { state.results.clear(); state.selected.clear(); }
  for (const b of document.querySelectorAll("nav button")) {
    b.setAttribute("aria-current", String(b.dataset.queue === queue));
  }
  status("loading " + queue + " …");
  const data = await api("GET", "/api/failed/" + encodeURIComponent(queue) + "?limit=" + state.limit);
  status("");
  if (!data) return;
  state.messages = data.messages;
  render();
}

function groupsOf(messages) {
  const groups = new Map();
  for (const m of messages) {
    const key = JSON.stringify([m.reason, m.plugin, m.plugin_sha256]);
    if (!groups.has(key)) groups.set(key, { reason: m.reason, plugin: m.plugin, sha: m.plugin_sha256, messages: [] });
    groups.get(key).messages.push(m);
  }
  return [...groups.values()];
}

function render() {
  const section = $("queue");
  const ids = state.messages.map((m) => m.id);
  const toolbar = el("div", { class: "toolbar" },
    el("button", { type: "button", class: "primary", onclick: () => act("replay", [...state.selected]) }, "Replay selected"),
    el("button", { type: "button", onclick: () => dryRun([...state.selected]) }, "Dry-run selected"),
    el("button", { type: "button", class: "danger", onclick: () => act("discard", [...state.selected]) }, "Discard selected"),
    el("button", { type: "button", onclick: () => act("replay", null) }, "Replay all"),
    el("button", { type: "button", onclick: () => dryRun(ids) }, "Dry-run all shown"),
    el("button", { type: "button", class: "danger", onclick: () => act("discard", null) }, "Discard all"),
    el("label", { for: "upload" }, "Dry-run with plugin file:"),
    uploadInput());
  const shown = state.messages.length;
  const title = el("h2", { text: state.queue + "@failed · " + (state.total > shown
    ? "groups of the first " + shown + " of " + state.total + " messages" : shown + " messages") });
  const groups = groupsOf(state.messages).map(renderGroup);
  if (!groups.length) groups.push(el("p", { class: "hint", text: "Nothing is parked here." }));
  if (state.total > shown && state.limit < MAX) {
    const more = Math.min(MAX, state.limit + PAGE) - state.limit;
    groups.push(el("button", { type: "button", id: "more", onclick: () => { state.limit += more; openQueue(state.queue, true); } },
      "Show " + Math.min(more, state.total - shown) + " more"));
  } else if (state.total > shown) {
    groups.push(el("p", { class: "hint", text: "The console reads the first " + MAX +
      " messages of a queue; `worker-host failed list` reads them all." }));
  }
  section.replaceChildren(title, toolbar, ...groups);
}

function uploadInput() {
  const input = el("input", { id: "upload", type: "file", accept: ".wasm,application/wasm" });
  input.addEventListener("change", () => { state.upload = input.files[0] || null; });
  return input;
}

function renderGroup(group) {
  const ids = group.messages.map((m) => m.id);
  const head = el("div", { class: "head" },
    el("strong", { text: (group.reason || "no reason") + " · " + group.messages.length + " message" + (group.messages.length === 1 ? "" : "s") }),
    el("span", { class: "tag", text: (group.plugin || "?") + " " + (group.sha || "").slice(0, 12) }),
    el("button", { type: "button", onclick: () => act("replay", ids) }, "Replay group"),
    el("button", { type: "button", onclick: () => dryRun(ids) }, "Dry-run group"),
    el("button", { type: "button", class: "danger", onclick: () => act("discard", ids) }, "Discard group"));
  return el("div", { class: "group" }, head, ...group.messages.map(renderMessage));
}

function renderMessage(m) {
  const box = el("input", { type: "checkbox", "aria-label": "select " + m.id });
  box.checked = state.selected.has(m.id);
  box.addEventListener("change", () => { box.checked ? state.selected.add(m.id) : state.selected.delete(m.id); });
  const line = el("div", { class: "line" }, box,
    el("span", { class: "id", text: m.id }),
    el("span", { class: "cause", text: m.cause || "" }),
    el("button", { type: "button", "data-action": "replay", onclick: () => act("replay", [m.id]) }, "Replay"),
    el("button", { type: "button", "data-action": "dry-run", onclick: () => dryRun([m.id]) }, "Dry-run"),
    el("button", { type: "button", "data-action": "edit", onclick: () => openEdit(m) }, "Edit"),
    el("button", { type: "button", "data-action": "discard", class: "danger", onclick: () => act("discard", [m.id]) }, "Discard"));
  const details = el("details", {}, el("summary", { text: "headers, properties and body (" + m.size + " bytes)" }),
    table(m.headers), table(m.properties), el("pre", { class: "body", text: bodyText(m) }));
  const node = el("div", { class: "message", "data-id": m.id }, line, details);
  const result = state.results.get(m.id);
  if (result) node.append(renderResult(result));
  return node;
}

function table(object) {
  const rows = Object.entries(object || {}).map(([k, v]) =>
    el("tr", {}, el("td", { text: k }), el("td", { text: typeof v === "string" ? v : JSON.stringify(v) })));
  return el("table", {}, el("tbody", {}, ...rows));
}

function bodyText(m) {
  let text;
  if (m.body_hex) text = "hex: " + m.body_hex;
  else {
    try { text = JSON.stringify(JSON.parse(m.body_preview), null, 2); } catch (_) { text = m.body_preview; }
  }
  return m.body_truncated ? text + "\n… (" + m.size + " bytes in all)" : text;
}

function renderResult(r) {
  const good = r.answer === "ok";
  const what = "dry-run: " + r.answer + (r.error ? " (" + r.error + ")" : "") + (r.reason ? " · " + r.reason : "");
  return el("div", { class: "result " + (good ? "ok" : "bad") },
    el("strong", { text: what }),
    el("pre", { text: JSON.stringify(r.effects, null, 2) }));
}

async function act(action, ids) {
  if (ids && !ids.length) { notice("Select messages first."); return; }
  const what = ids ? ids.length + " message" + (ids.length === 1 ? "" : "s") : "every message";
  if (action === "discard" && !confirm("Discard " + what + " for good?")) return;
  const body = JSON.stringify(ids ? { ids } : { all: true });
  const data = await api("POST", "/api/failed/" + encodeURIComponent(state.queue) + "/" + action, body);
  if (!data) return;
  for (const id of ids || []) state.selected.delete(id);
  // Many messages: a job, followed in jobs.js.
  if (data.job) { notice(""); followJob(data.job); return; }
  notice((action === "replay" ? "Replayed " : "Discarded ") + data.done + " message" + (data.done === 1 ? "" : "s") +
    (data.missing.length ? "; not found: " + data.missing.join(", ") : ""), "info");
  await refresh();
}

async function dryRun(ids) {
  if (!ids.length) { notice("Select messages first."); return; }
  const selection = JSON.stringify({ ids });
  const path = "/api/failed/" + encodeURIComponent(state.queue) + "/dry-run";
  status("dry-run of " + ids.length + " …");
  const data = state.upload
    ? await api("POST", path + "?select=" + encodeURIComponent(selection), await state.upload.arrayBuffer(), "application/wasm")
    : await api("POST", path, selection);
  status("");
  if (!data) return;
  for (const r of data.results) state.results.set(r.id, r);
  notice("Dry-run of " + data.results.length + " message" + (data.results.length === 1 ? "" : "s") +
    (state.upload ? " with " + state.upload.name : "") + ": nothing was sent or written.", "info");
  render();
}

// Edit and replay: the edited copy goes to the queue as <id>.edit<n>, the original is removed
// once the copy is confirmed (the service writes the audit line).

let editing = null;

const parses = (text) => { try { JSON.parse(text); return true; } catch (_) { return false; } };

function editableHeaders(headers) {
  const out = {};
  for (const [k, v] of Object.entries(headers || {})) {
    if (!k.startsWith("worker-") && !k.startsWith("x-")) out[k] = typeof v === "string" ? v : JSON.stringify(v);
  }
  return out;
}

function openEdit(m) {
  if (m.body_hex || m.body_truncated) {
    notice("Only a text body shown whole can be edited here: use `worker-host failed edit --body FILE`.");
    return;
  }
  editing = m;
  $("edit-title").textContent = "Edit " + m.id + " and replay the copy to " + state.queue;
  $("edit-body").value = bodyText(m);
  $("edit-headers").value = JSON.stringify(editableHeaders(m.headers), null, 2);
  $("edit-error").hidden = true;
  $("edit-dialog").showModal();
}

function editError(text) {
  $("edit-error").textContent = text;
  $("edit-error").hidden = false;
}

$("edit-save").addEventListener("click", async (event) => {
  event.preventDefault();
  const m = editing;
  const body = $("edit-body").value;
  const json = ((m.properties || {}).content_type || "").includes("json") || parses(m.body_preview);
  if (json && !parses(body)) return editError("The body is JSON and must stay JSON.");
  let headers;
  try { headers = JSON.parse($("edit-headers").value); } catch (err) { return editError("Headers: " + err.message); }
  if (!headers || typeof headers !== "object" || Array.isArray(headers)) return editError("Headers: a JSON object.");
  const before = editableHeaders(m.headers);
  const set = {};
  for (const [k, v] of Object.entries(headers)) {
    const text = typeof v === "string" ? v : JSON.stringify(v);
    if (before[k] !== text) set[k] = text;
  }
  const remove = Object.keys(before).filter((k) => !(k in headers));
  // The body as shown (JSON pretty-printed) and left alone is sent as it was.
  const changed = body === bodyText(m) ? undefined : body;
  $("edit-dialog").close();
  const asked = JSON.stringify({ id: m.id, body: changed, set_headers: set, remove_headers: remove });
  const data = await api("POST", "/api/failed/" + encodeURIComponent(state.queue) + "/edit", asked);
  if (!data) return;
  notice("Replayed " + m.id + " to " + state.queue + " as " + data.id + " (" + data.diff + ").", "info");
  await refresh();
});

// Failure groups across queues, and search; each says what part of each queue it read.

$("groups-button").addEventListener("click", () => showGroups());
$("search-form").addEventListener("submit", (event) => { event.preventDefault(); search($("search-input").value); });

const plural = (n, word) => n + " " + word + (n === 1 ? "" : "s");

function leaveQueue(view, hash) {
  state.view = view;
  history.replaceState(null, "", "#" + hash);
  for (const b of document.querySelectorAll("nav button[data-queue]")) b.setAttribute("aria-current", "false");
}

function coverage(scanned) {
  const partial = scanned.some((c) => !c.complete);
  const parts = scanned.map((c) => c.error ? c.queue + ": not read (" + c.error + ")"
    : c.queue + ": " + c.scanned + " of " + c.depth + " read");
  const lead = partial ? "Counts cover the head of each queue only: " : "Every parked message was read: ";
  return el("p", { class: "scan" + (partial ? " partial" : ""), text: lead + parts.join(" · ") });
}

async function showGroups() {
  leaveQueue("groups", "groups");
  status("grouping …");
  const data = await api("GET", "/api/groups");
  status("");
  if (!data) return;
  state.groups = data;
  renderGroups();
}

function renderGroups() {
  const data = state.groups;
  const total = data.groups.reduce((n, g) => n + g.count, 0);
  const title = el("h2", { text: "Failure groups · " + plural(data.groups.length, "group") + " · " + plural(total, "message") });
  const nodes = data.groups.map(renderFailureGroup);
  if (!nodes.length) nodes.push(el("p", { class: "hint", text: "Nothing is parked in any queue." }));
  if (data.ungrouped) nodes.push(el("p", { class: "hint", text: data.ungrouped + " more messages fall in further groups." }));
  $("queue").replaceChildren(title, coverage(data.scanned), ...nodes);
}

function renderFailureGroup(g) {
  const queues = Object.entries(g.queues).map(([q, n]) => q + " (" + n + ")").join(", ");
  const head = el("div", { class: "head" },
    el("span", { class: "fingerprint", text: g.fingerprint || "(no cause)" }),
    el("strong", { class: "gcount", text: plural(g.count, "message") }),
    el("span", { class: "tag", text: (g.plugin || "?") + " " + (g.plugin_sha256 || "").slice(0, 12) }),
    el("button", { type: "button", "data-action": "replay", onclick: () => groupAct(g, "replay") }, "Replay group"),
    el("button", { type: "button", "data-action": "dry-run", onclick: () => groupAct(g, "dry-run") }, "Dry-run group"),
    el("button", { type: "button", "data-action": "discard", class: "danger", onclick: () => groupAct(g, "discard") }, "Discard group"));
  const meta = el("div", { class: "meta", text: "in " + queues + " · first seen " + (g.first_seen || "?") +
    " · last seen " + (g.last_seen || "?") });
  const example = el("details", { class: "message" }, el("summary", { text: "example: " + g.example.id }),
    table(g.example.headers), el("pre", { class: "body", text: bodyText(g.example) }));
  const node = el("div", { class: "group fgroup", "data-group": g.group }, head, meta, example);
  const result = state.groupResults.get(g.group);
  if (result) node.append(result);
  return node;
}

async function groupAct(g, action) {
  if (action === "discard" && !confirm("Discard every message of this group, in every queue, for good?")) return;
  status(action + " of a group …");
  const data = await api("POST", "/api/groups/" + encodeURIComponent(g.group) + "/" + action, "{}");
  status("");
  if (!data) return;
  if (data.job) { notice(""); followJob(data.job); return; }
  if (action === "dry-run") {
    const results = data.queues.flatMap((q) => q.results);
    const answers = {};
    for (const r of results) answers[r.answer] = (answers[r.answer] || 0) + 1;
    const what = "dry-run: " + Object.entries(answers).map(([a, n]) => n + " " + a).join(", ");
    state.groupResults.set(g.group, el("div", { class: "result" }, el("strong", { text: what }),
      el("pre", { text: JSON.stringify(results.slice(0, 20), null, 2) })));
    notice("Dry-run of " + plural(results.length, "message") + " of the group: nothing was sent or written.", "info");
    renderGroups();
    return;
  }
  notice((action === "replay" ? "Replayed " : "Discarded ") + plural(data.done, "message") + " of the group.", "info");
  state.groupResults.delete(g.group);
  await refresh();
}

async function search(text) {
  text = text.trim();
  if (!text) { notice("Type what to find: an id, a header value, a word of a body."); return; }
  const here = $("search-here").checked && state.queue;
  leaveQueue("search", "search=" + encodeURIComponent(text));
  state.query = text;
  const path = "/api/search?q=" + encodeURIComponent(text) + (here ? "&queue=" + encodeURIComponent(state.queue) : "");
  status("searching …");
  const data = await api("GET", path);
  status("");
  if (!data) return;
  const title = el("h2", { text: "Search “" + text + "” · " + data.messages.length + (data.more ? "+" : "") + " found" });
  const found = data.messages.map(renderFound);
  if (!found.length) found.push(el("p", { class: "hint", text: "No parked message holds that text in the part read." }));
  $("queue").replaceChildren(title, coverage(data.scanned), el("div", { class: "group" }, ...found));
}

function renderFound(m) {
  const line = el("div", { class: "line" },
    el("span", { class: "id", text: m.id }),
    el("span", { class: "tag", text: m.queue }),
    el("span", { class: "cause", text: m.cause || "" }),
    el("span", { class: "where", text: "found in " + m.found_in.join(", ") }),
    el("button", { type: "button", onclick: () => openQueue(m.queue) }, "Open queue"));
  const details = el("details", {}, el("summary", { text: "headers, properties and body (" + m.size + " bytes)" }),
    table(m.headers), table(m.properties), el("pre", { class: "body", text: bodyText(m) }));
  return el("div", { class: "message found", "data-id": m.id }, line, details);
}

refresh();
