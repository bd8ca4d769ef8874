// The overview: every subscription with its live figures, polled from /api/overview every few
// seconds. Everything from the service is set as text (textContent) or as SVG attributes.
"use strict";

const TOKEN_KEY = "worker-host-console-token"; // shared with the parked-message page
const EVERY_MS = 3000;
const SVG = "http://www.w3.org/2000/svg";
const SPARK_W = 120, SPARK_H = 28;
// A sparkline spans the history there is, at least this many samples (a minute), at most the window.
const SPARK_MIN = 12;
let timer = null;
let waitingForToken = false;

const $ = (id) => document.getElementById(id);

function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "text") node.textContent = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) if (child) node.append(child);
  return node;
}

function notice(text) {
  $("notice").textContent = text;
  $("notice").hidden = !text;
}

async function load() {
  const headers = {};
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (token) headers["Authorization"] = "Bearer " + token;
  let response;
  try {
    response = await fetch("/api/overview", { headers });
  } catch (err) {
    notice("The service did not answer: " + err.message);
    return null;
  }
  if (response.status === 401) {
    notice("The console needs its token ([admin] token, sent as Authorization: Bearer): enter it with the Token button.");
    askToken();
    return null;
  }
  const data = await response.json().catch(() => null);
  if (!response.ok || !data) {
    notice((data && data.error) || ("HTTP " + response.status));
    return null;
  }
  notice("");
  return data;
}

function askToken() {
  waitingForToken = true;
  $("token-input").value = sessionStorage.getItem(TOKEN_KEY) || "";
  if (!$("token-dialog").open) $("token-dialog").showModal();
}

// Cancelled, the page waits for the Token button rather than asking again at once.
$("token-dialog").addEventListener("close", () => {
  if ($("token-dialog").returnValue !== "save") return;
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value);
  waitingForToken = false;
  poll();
});
$("token-button").addEventListener("click", askToken);

async function poll() {
  clearTimeout(timer);
  const data = await load();
  if (data) render(data);
  if (!waitingForToken) timer = setTimeout(poll, EVERY_MS);
}

function render(data) {
  const health = $("health");
  health.hidden = false;
  health.className = data.ready ? "ready" : "";
  health.textContent = data.ready ? "Ready" : "Not ready: " + data.not_ready;
  const broker = $("broker");
  broker.hidden = !data.broker.error;
  broker.textContent = data.broker.error ? "Queue depths unknown: RabbitMQ cannot be read (" + data.broker.error + ")" : "";
  $("spark-head").textContent = "last " + Math.round(data.window_s / 60) + " min";
  $("rows").replaceChildren(...data.subscriptions.map((s) => row(s, data)));
  $("status").textContent = "updated " + new Date(data.now).toLocaleTimeString();
}

function row(s, data) {
  const tr = el("tr", { "data-queue": s.queue, class: (s.paused ? "paused " : "") + (s.down.length ? "down" : "") });
  const link = el("a", { href: "/failed#" + encodeURIComponent(s.queue), text: s.queue, title: "parked messages of " + s.queue });
  const state = s.paused
    ? el("span", { class: "state paused", text: "paused", title: "pause_after " + s.pause_after + " answers in a row were not ok; takes no deliveries for " + s.pause_for_s + " s, then one at a time" })
    : el("span", { class: "state running", text: "running" });
  const retry = s.depth.retry.map((r) => r.queue.slice(s.queue.length + "@retry.".length) + ": " + count(r.depth.ready)).join(" · ");
  const parked = el("a", { href: "/failed#" + encodeURIComponent(s.queue), text: count(s.depth.failed) });
  if (s.depth.failed > 0) parked.setAttribute("class", "bad");
  tr.append(
    el("td", { class: "queue" }, link, el("div", { class: "plugin", text: s.plugin + (s.version ? " · " + s.version : " · not loaded") })),
    el("td", { class: "states" }, state, s.down.length
      ? el("span", { class: "state down", text: "dependency down", title: s.down.join("; ") }) : null),
    rate(s.rates.ok, "ok"), rate(s.rates.retry, "retry"), rate(s.rates.fail, "fail"),
    el("td", {}, spark(s.spark, data.sample_every_s, data.window_s)),
    el("td", { class: "num", text: s.in_flight + " / " + s.concurrency }),
    el("td", { class: "num", text: count(s.consumers) }),
    el("td", { class: "last-ok", text: ago(s.last_ok, data.now) }),
    el("td", { class: "num depth", text: count(s.depth.queue) }),
    el("td", { class: "retries", text: retry || "none" }),
    el("td", { class: "num parked" }, parked),
  );
  return tr;
}

function rate(value, kind) {
  const text = value === 0 ? "0" : value < 10 ? value.toFixed(2) : value.toFixed(1);
  return el("td", { class: "num rate " + kind + (value === 0 ? " zero" : ""), "data-rate": kind, text });
}

function count(n) { return n === null || n === undefined ? "?" : String(n); }

function ago(at, now) {
  if (!at) return "never";
  const s = Math.max(0, Math.round((now - at) / 1000));
  if (s < 60) return s + " s ago";
  if (s < 3600) return Math.floor(s / 60) + " min ago";
  if (s < 86400) return Math.floor(s / 3600) + " h ago";
  return Math.floor(s / 86400) + " d ago";
}

function span(s) { return s < 120 ? s + " s" : Math.round(s / 60) + " min"; }

// Three lines (ok, retry, fail) on one scale, the newest at the right, over the history there is
// (a minute at least, the window at most).
function spark(points, everyS, windowS) {
  const svg = document.createElementNS(SVG, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("width", SPARK_W);
  svg.setAttribute("height", SPARK_H);
  svg.setAttribute("viewBox", "0 0 " + SPARK_W + " " + SPARK_H);
  const n = points.ok.length;
  const max = Math.max(0.01, ...points.ok, ...points.retry, ...points.fail);
  const slots = Math.min(windowS / everyS, Math.max(n, SPARK_MIN));
  const step = SPARK_W / slots;
  const title = document.createElementNS(SVG, "title");
  title.textContent = "peak " + max.toFixed(2) + "/s over the last " + span(slots * everyS);
  svg.append(title);
  for (const kind of ["ok", "retry", "fail"]) {
    const line = document.createElementNS(SVG, "polyline");
    const coords = points[kind].map((v, i) =>
      ((slots - n + i + 1) * step).toFixed(1) + "," + (SPARK_H - 1 - (v / max) * (SPARK_H - 2)).toFixed(1));
    line.setAttribute("points", coords.join(" "));
    line.setAttribute("class", kind + "-line");
    svg.append(line);
  }
  return svg;
}

poll();
