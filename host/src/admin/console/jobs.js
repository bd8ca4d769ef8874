// Jobs: a replay or discard of many messages runs in the service, not in the request. The API
// answers 202 with the job; this follows it (GET /api/jobs/{id} every half second), shows its
// progress (messages looked at of the total, moved or removed, rate, time left, a bar) and a
// Cancel button (POST /api/jobs/{id}/cancel). Uses el, api, notice and refresh of console.js.
"use strict";

const JOB_POLL_MS = 500;
// The jobs this page shows, by id: running ones, and finished ones until dismissed.
const jobs = new Map();
let following = false;

const running = (job) => job.state === "running" || job.state === "cancelling";
const number = (n) => Math.round(n).toLocaleString("en");

function jobTitle(job) {
  const what = job.target.queue !== undefined ? job.target.queue + "@failed" : "failure group " + job.target.group;
  return (job.action === "replay" ? "Replay of " : "Discard of ") + what;
}

function jobFigures(job) {
  const past = job.action === "replay" ? " moved" : " removed";
  const parts = [number(job.examined) + " of " + number(job.total) + " looked at", number(job.done) + past];
  if (running(job)) {
    parts.push(number(job.rate) + "/s");
    if (job.eta_seconds !== null) parts.push("about " + Math.ceil(job.eta_seconds) + " s left");
  } else {
    parts.push("in " + job.elapsed_seconds + " s");
  }
  if (job.state === "cancelled") parts.push("cancelled: the rest are still parked");
  if (job.error) parts.push(job.error);
  return parts.join(" · ");
}

function renderJob(job) {
  const bar = el("progress", { max: String(Math.max(job.total, 1)), value: String(job.examined),
    "aria-label": jobTitle(job) + " progress" });
  const button = running(job)
    ? el("button", { type: "button", class: "danger", "data-action": "cancel", onclick: () => cancelJob(job) },
      job.state === "cancelling" ? "Cancelling …" : "Cancel")
    : el("button", { type: "button", "data-action": "dismiss", onclick: () => { jobs.delete(job.id); renderJobs(); } }, "Dismiss");
  if (job.state === "cancelling") button.disabled = true;
  const head = el("div", { class: "job-head" }, el("strong", { text: jobTitle(job) }),
    el("span", { class: "job-state tag", text: job.state }), button);
  return el("div", { class: "job", "data-job": job.id, "data-state": job.state }, head, bar,
    el("div", { class: "job-figures", text: jobFigures(job) }));
}

function renderJobs() {
  const box = $("jobs");
  box.replaceChildren(...[...jobs.values()].map(renderJob));
  box.hidden = jobs.size === 0;
}

// Shows a job the API just started, and follows it until it ends.
function followJob(job) {
  jobs.set(job.id, job);
  renderJobs();
  poll();
}

async function poll() {
  if (following) return;
  following = true;
  while ([...jobs.values()].some(running)) {
    await new Promise((resolve) => setTimeout(resolve, JOB_POLL_MS));
    for (const job of [...jobs.values()].filter(running)) {
      const fresh = await api("GET", "/api/jobs/" + encodeURIComponent(job.id));
      if (!fresh) { jobs.delete(job.id); continue; }
      jobs.set(fresh.id, fresh);
      if (!running(fresh)) ended(fresh);
    }
    renderJobs();
  }
  following = false;
}

function ended(job) {
  const what = job.state === "done" ? " done: " : job.state === "cancelled" ? " cancelled: " : " failed: ";
  notice(jobTitle(job) + what + jobFigures(job), job.state === "failed" ? "" : "info");
  refresh();
}

async function cancelJob(job) {
  const view = await api("POST", "/api/jobs/" + encodeURIComponent(job.id) + "/cancel", "{}");
  if (!view) return;
  jobs.set(view.id, view);
  renderJobs();
}

// Jobs started before this page was opened (or by another tab) that are still running.
async function loadJobs() {
  const data = await api("GET", "/api/jobs");
  if (!data) return;
  for (const job of data.jobs) if (running(job) && !jobs.has(job.id)) jobs.set(job.id, job);
  renderJobs();
  poll();
}
