// The web view: an overview with charts, the units with search, filters, paging and
// totals, a page per unit with its timeline, and the schedules and waiting notices.
// No build step, no CDN: this file, the page and its style sheet are all there is.
// Auth is the HttpOnly cookie set by /?token=...; fetch sends it, and Origin, itself.
// Changes are pushed (GET /v1/changes, Server-Sent Events): a page is read again
// when something on it changed, never on a timer, so an idle tab costs nothing.
"use strict";
const $ = (s) => document.querySelector(s);
const esc = (s) => String(s ?? "").replace(/[&<>"']/g, (c) => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;"}[c]));
// The header says whether the page is live, or what is wrong and since when.
let downSince = null;
const say = (text) => { if ($("#conn").textContent !== text) $("#conn").textContent = text; };
const connOk = (text) => { downSince = null; say(text); $("#conn").className = "";
  $("main").classList.remove("stale"); };
const connBad = (text) => { downSince ||= new Date(); $("#conn").className = "down";
  say(`${text} (since ${downSince.toLocaleTimeString()})`); $("main").classList.add("stale"); };
const api = async (path, opts = {}) => {
  let r;
  try {
    r = await fetch(path, {credentials: "same-origin", ...opts,
      headers: {"content-type": "application/json", ...(opts.headers || {})}});
  } catch (e) { connBad("server unreachable: retrying"); throw e; }
  if (r.status === 401) connBad("not logged in: open the address `workunits ui` prints");
  return r;
};
const getJson = async (path) => { const r = await api(path); if (!r.ok) throw new Error(`${r.status}`); return r.json(); };
const age = (t) => { const s = Math.max(0, Date.now() / 1000 - t);
  return s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(0)}m` : s < 86400 ? `${(s / 3600).toFixed(1)}h` : `${(s / 86400).toFixed(1)}d`; };
const when = (t) => t == null ? "" : new Date(t * 1000).toLocaleString();
const span = (s) => s == null ? "" : s < 1 ? `${(s * 1000).toFixed(0)} ms` : s < 120 ? `${s.toFixed(1)} s` : s < 7200 ? `${(s / 60).toFixed(1)} min` : `${(s / 3600).toFixed(1)} h`;
const pretty = (v) => JSON.stringify(v, null, 2);
const idLink = (id) => id ? `<a href="#/unit/${esc(id)}">${esc(id)}</a>` : "";
// A running unit's bar and the age of its last report (a stall shows); an ended
// unit's last percentage would read as work still to do, so it shows none.
const bar = (u) => {
  if (u.progress == null && !u.progress_message) return "";
  const ended = u.terminal;  // the server's is_terminal(): no status list here
  const fill = ended || u.progress == null ? "" :
    `<span class="bar" role="progressbar" aria-label="progress" aria-valuemin="0" aria-valuemax="100" ` +
    `aria-valuenow="${Math.round(u.progress * 100)}"><span data-width="${Math.round(u.progress * 100)}"></span></span>`;
  const ago = !ended && u.progress_at ? `<span class="age">${age(u.progress_at)} ago</span> ` : "";
  return `${fill}${ago}<span class="msg">${esc(u.progress_message)}</span>`;
};

// -- pushed changes ------------------------------------------------------------------
// One stream for the whole page; each view says what to do when units change.
let onChanged = null;  // (ids, more) => void, set by the view shown
let changes = null;
function listenForChanges() {
  if (changes) return;
  changes = new EventSource("/v1/changes");
  changes.addEventListener("ready", () => { if (!unitState) connOk("live"); });
  changes.addEventListener("changed", (e) => { const d = JSON.parse(e.data);
    if (onChanged) onChanged(new Set(d.ids), d.more); });
  changes.addEventListener("error", () => {
    if (changes.readyState === EventSource.CLOSED) { changes = null; setTimeout(listenForChanges, 2000); }
    connBad("server unreachable: reconnecting"); });
  changes.addEventListener("open", () => { if (downSince) { connOk("live"); if (onChanged) onChanged(new Set(), true); } });
}
// At most one read in flight and one waiting: a burst of changes is one more read.
function coalesced(read) {
  let running = false; let again = false;
  const go = async () => {
    if (running) { again = true; return; }
    running = true;
    try { await read(); } catch { /* the header says why */ } finally {
      running = false; if (again) { again = false; go(); } }
  };
  return go;
}

// -- the overview --------------------------------------------------------------------
const STATUSES = ["pending", "running", "completed", "failed", "killed", "expired"];
async function showOverview() {
  const stats = await getJson("/v1/stats");
  const samples = stats.samples;
  const last = samples[samples.length - 1] || {};
  $("#o-cards").innerHTML = STATUSES.map((s) =>
    `<div class="card status-${s}"><div class="n" data-status="${s}">${last[s] || 0}</div><div>${s}</div></div>`).join("");
  const ends = (x) => (x.completed || 0) + (x.failed || 0) + (x.killed || 0) + (x.expired || 0);
  const per = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1]; const b = samples[i]; const minutes = Math.max(1e-9, (b.t - a.t) / 60);
    const ended = Math.max(0, ends(b) - ends(a));
    const bad = Math.max(0, (b.failed || 0) + (b.killed || 0) - (a.failed || 0) - (a.killed || 0));
    per.push({t: b.t, throughput: ended / minutes, failures: ended ? Math.min(1, bad / ended) : 0});
  }
  chart($("#c-queue"), [
    {name: "pending", points: samples.map((x) => [x.t, x.pending || 0])},
    {name: "running", points: samples.map((x) => [x.t, x.running || 0])}]);
  chart($("#c-throughput"), [{name: "per minute", points: per.map((x) => [x.t, x.throughput])}]);
  chart($("#c-failures"), [{name: "failed or killed", points: per.map((x) => [x.t, x.failures * 100])}], "%");
  $("#o-note").textContent = samples.length < 2
    ? "Charts fill in as the server samples its units (every 10 s)."
    : `Sampled every ${stats.every} s, and as units change, since ${when(samples[0].t)}.`;
}
// A line chart in SVG, drawn here: no library, nothing fetched.
function chart(box, series, unit = "") {
  const W = 360; const H = 120; const P = 28;
  const all = series.flatMap((s) => s.points);
  if (all.length < 2) { box.innerHTML = `<p class="empty">not enough samples yet</p>`; return; }
  const t0 = Math.min(...all.map((p) => p[0])); const t1 = Math.max(...all.map((p) => p[0]));
  const top = Math.max(1, ...all.map((p) => p[1]));
  const x = (t) => P + (W - P - 4) * (t1 === t0 ? 1 : (t - t0) / (t1 - t0));
  const y = (v) => H - 16 - (H - 24) * (v / top);
  const lines = series.map((s, i) => `<polyline class="line l${i}" fill="none" points="${
    s.points.map((p) => `${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ")}"><title>${esc(s.name)}</title></polyline>`).join("");
  const legend = series.map((s, i) => `<tspan class="l${i}">${esc(s.name)}</tspan>`).join(" · ");
  const lastValues = series.map((s) => s.points.length ? s.points[s.points.length - 1][1] : 0);
  box.innerHTML = `<svg viewBox="0 0 ${W} ${H}" role="img" aria-label="${esc(series.map((s, i) =>
    `${s.name} now ${lastValues[i].toFixed(1)}${unit}`).join(", "))}">
    <line class="axis" x1="${P}" y1="${H - 16}" x2="${W}" y2="${H - 16}"></line>
    <text x="2" y="12" class="tick">${top.toFixed(top < 10 ? 1 : 0)}${unit}</text>
    <text x="2" y="${H - 18}" class="tick">0</text>
    <text x="${P}" y="${H - 3}" class="tick">${new Date(t0 * 1000).toLocaleTimeString()}</text>
    <text x="${W - 70}" y="${H - 3}" class="tick">${new Date(t1 * 1000).toLocaleTimeString()}</text>
    ${lines}<text x="${P + 4}" y="12" class="legend">${legend}</text></svg>`;
}

// -- the units -----------------------------------------------------------------------
const PAGE = 50;
let listAfter = [];  // the `after` of each page shown so far: [null, id1, id2, ...]
const selected = new Set();
function listQuery() {
  const p = new URLSearchParams({limit: String(PAGE), order: $("#f-order").value});
  const put = (name, value) => { if (value) p.set(name, value); };
  put("q", $("#f-q").value.trim()); put("status", $("#f-status").value); put("kind", $("#f-kind").value);
  put("parent", $("#f-parent").value.trim()); put("key", $("#f-key").value.trim());
  const secs = (el) => el.value ? String(new Date(el.value).getTime() / 1000) : "";
  put("created_after", secs($("#f-from"))); put("created_before", secs($("#f-to")));
  return p;
}
const refreshList = coalesced(async () => {
  const p = listQuery();
  const after = listAfter[listAfter.length - 1];
  if (after) p.set("after", after);
  const r = await api(`/v1/units?${p}`);
  if (!r.ok) {
    const problem = await r.json().catch(() => ({}));
    $("#l-total").textContent = `${problem.title || r.status}: ${problem.detail || ""}`; return;
  }
  const page = await r.json();
  showRows(page.items);
  const n = page.total_exact ? `${page.total}` : `at least ${page.total}`;
  $("#l-total").textContent = `${n} unit${page.total === 1 ? "" : "s"} match`;
  const first = (listAfter.length - 1) * PAGE;
  $("#p-where").textContent = page.items.length ? `showing ${first + 1}–${first + page.items.length}` : "none here";
  $("#p-next").disabled = !page.next; $("#p-next").dataset.next = page.next || "";
  $("#p-first").disabled = listAfter.length <= 1;
  connOk("live");
});
// The table is updated in place: a row per unit, kept while the unit is shown,
// and a cell is rewritten only when what it shows changed, so a selection (an
// ID being copied) and the keyboard focus survive the refreshes.
const rows = new Map();  // unit ID -> its <tr>
function showRows(units) {
  const tbody = $("#units tbody");
  const shown = new Set(units.map((u) => u.id));
  for (const [id, tr] of rows) if (!shown.has(id)) { tr.remove(); rows.delete(id); }
  let prev = null;
  for (const u of units) {
    let tr = rows.get(u.id);
    if (!tr) { tr = newRow(u.id); rows.set(u.id, tr); }
    fillRow(tr, u);
    const at = prev ? prev.nextSibling : tbody.firstChild;
    if (at !== tr) tbody.insertBefore(tr, at);
    prev = tr;
  }
  for (const id of [...selected]) if (!shown.has(id)) selected.delete(id);
  bulkButtons();
}
function newRow(id) {
  const tr = document.createElement("tr"); tr.dataset.id = id;
  tr.innerHTML = `<td><input type="checkbox" class="sel" aria-label="select ${esc(id)}"></td>` +
    `<td class="id"><a href="#/unit/${esc(id)}">${esc(id)}</a></td>` +
    "<td></td><td></td><td></td><td class=\"progress\"></td><td class=\"desc\"></td>";
  tr.querySelector(".sel").addEventListener("change", (e) => {
    if (e.target.checked) selected.add(id); else selected.delete(id); bulkButtons(); });
  return tr;
}
const setCell = (td, html) => { if (td.dataset.html !== html) { td.innerHTML = html; td.dataset.html = html; return true; } return false; };
function fillRow(tr, u) {
  const [, , kind, status, made, progress, desc] = tr.cells;
  tr.className = `row-${u.status}`; tr.dataset.terminal = String(u.terminal);
  setCell(kind, esc(u.kind));
  status.className = `status-${u.status}`;
  setCell(status, esc(u.expired ? "expired" : u.status));
  setCell(made, age(u.created_at));
  if (setCell(progress, bar(u))) for (const el of progress.querySelectorAll("[data-width]")) el.style.width = `${el.dataset.width}%`;
  setCell(desc, esc(u.description));
}
function bulkButtons() {
  const live = [...selected].filter((id) => rows.get(id)?.dataset.terminal === "false");
  $("#b-bulk-cancel").disabled = $("#b-bulk-kill").disabled = live.length === 0;
  $("#b-bulk-cancel").textContent = `Cancel selected (${live.length})`;
  $("#b-bulk-kill").textContent = `Kill selected (${live.length})`;
}
async function bulk(verb) {
  const ids = [...selected].filter((id) => rows.get(id)?.dataset.terminal === "false");
  const body = verb === "cancel" ? JSON.stringify({grace: 2}) : undefined;
  await Promise.all(ids.map((id) => api(`/v1/units/${id}/${verb}`, {method: "POST", body}).catch(() => null)));
  selected.clear();
  for (const box of document.querySelectorAll("#units .sel")) box.checked = false;
  $("#sel-all").checked = false;
  refreshList();
}

// -- schedules and notices -------------------------------------------------------------
async function showSchedules() {
  const list = await getJson("/v1/schedules");
  $("#schedules tbody").innerHTML = list.length ? list.map((s) => `<tr><td>${esc(s.name)}</td><td><code>${esc(s.cron)}</code></td>` +
    `<td>${esc(s.tz)}</td><td>${esc(s.catch_up)}</td><td>${when(s.next_at)}</td>` +
    `<td>${s.last ? `${esc(s.last.outcome)} ${when(s.last.due_at)} ${idLink(s.last.unit)}` : ""}</td></tr>`).join("")
    : `<tr><td colspan="6" class="empty">no schedules</td></tr>`;
}
async function showNotices() {
  const {items} = await getJson("/v1/notices");
  $("#notices tbody").innerHTML = items.length ? items.map((n) => `<tr><td>${idLink(n.id)}</td>` +
    `<td class="status-${esc(n.status)}">${esc(n.status)}</td><td>${n.parent ? idLink(n.parent) : "the application"}</td>` +
    `<td>${age(n.created_at)} ago</td><td>${n.claimed ? `yes, until ${when(n.claim_until)}` : "no"}</td><td>${n.deliveries}</td></tr>`).join("")
    : `<tr><td colspan="6" class="empty">none waiting</td></tr>`;
}
const encoder = new TextEncoder();
// An output event's bytes: its text (valid UTF-8, so encoding gives them back) or base64.
const bytesOf = (d) => d.text != null ? encoder.encode(d.text)
  : Uint8Array.from(atob(d.base64), (c) => c.charCodeAt(0));


// The output pane: text arrives as fast as the unit writes, so it is queued and
// appended at most five times a second as new text nodes (never by rewriting the
// <pre>), and only the last KEEP characters stay on the page: a note says how
// to read the rest.
const KEEP = 1 << 20;
class OutputView {
  constructor(pre, id) {
    this.pre = pre; this.id = id; this.queue = []; this.queued = 0; this.kept = 0; this.frame = 0;
    pre.textContent = "";
    const note = $("#u-trimmed"); note.hidden = true;
    note.querySelector("code").textContent = `workunits tail ${id}`;
    note.querySelector("a").href = `/v1/units/${id}/output?offset=0&limit=1048576`;
  }
  add(item) {  // a string, or an element (a gap's note)
    if (item === "") return;
    this.queue.push(item); this.queued += item.length ?? item.textContent.length;
    if (this.queued > 2 * KEEP) this.squeeze();  // a hidden tab gets no frames: stay bounded
    // At most five flushes a second: each lays the pane out again.
    if (!this.frame) this.frame = setTimeout(() => requestAnimationFrame(() => this.flush()), 200);
  }
  squeeze() {  // keep the queue's last KEEP characters
    let keep = 0; let i = this.queue.length;
    while (i > 0 && keep < KEEP) { i -= 1; const it = this.queue[i]; keep += it.length ?? it.textContent.length; }
    this.trimmed();  // more than twice KEEP came: some goes
    let first = this.queue[i];
    if (typeof first === "string" && keep > KEEP) { first = first.slice(keep - KEEP); keep = KEEP; }
    this.queue = [first, ...this.queue.slice(i + 1)]; this.queued = keep;
    this.pre.textContent = ""; this.kept = 0;  // all of the page's text is older than the queue
  }
  flush() {
    this.frame = 0;
    if (this.closed) return;
    const pre = this.pre;
    const follow = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 8;  // at the bottom: stay there
    let text = "";
    const put = () => { if (text) { pre.appendChild(document.createTextNode(text)); this.kept += text.length; text = ""; } };
    for (const it of this.queue) {
      if (typeof it === "string") { text += it; } else { put(); pre.appendChild(it); this.kept += it.textContent.length; }
    }
    put(); this.queue = []; this.queued = 0;
    while (this.kept > KEEP && pre.firstChild) {
      const node = pre.firstChild; const len = node.textContent.length;
      if (node.nodeType === Node.TEXT_NODE && this.kept - len < KEEP) {  // cut inside this node
        node.deleteData(0, this.kept - KEEP); this.kept = KEEP;
      } else { node.remove(); this.kept -= len; }
      this.trimmed();
    }
    if (follow) pre.scrollTop = pre.scrollHeight;
  }
  trimmed() { $("#u-trimmed").hidden = false; }
  close() { this.closed = true; this.queue = []; }
}
// A retain lapses when its renewals stop reaching a live server (a restart that
// took longer than its lease): take a new one, or say that it is gone.
async function renewRetain(state) {
  const body = JSON.stringify({lease: 30});
  let r;
  try { r = await api(state.lease, {method: "PUT", body}); } catch { return; }  // down: the next try
  if (r.status !== 404 || unitState !== state) return;
  const again = await api(`/v1/units/${state.id}/retain`, {method: "POST", body});
  if (again.ok && unitState === state) {
    state.lease = again.headers.get("location");
    $("#u-retain").textContent = "retained while open";
  } else {
    if (again.ok) api(again.headers.get("location"), {method: "DELETE"});
    if (unitState === state) {
      state.lease = null; clearInterval(state.renew);
      $("#u-retain").textContent = "not retained: the lease lapsed and could not be taken again";
    }
  }
}

// -- a unit's page -------------------------------------------------------------------
let unitState = null;  // {id, source, lease, renew, view, transcript}
async function openUnit(id) {
  closeUnit();
  $("#u-title").textContent = id; $("#u-output").textContent = ""; $("#u-record").innerHTML = "";
  $("#unit-view").classList.remove("missing"); $("#u-retain").textContent = ""; $("#u-said").textContent = "";
  for (const b of ["#b-retry", "#b-cancel", "#b-kill", "#b-signal"]) $(b).disabled = true;
  const state = unitState = {id, source: null, lease: null, renew: null};
  let known;
  try { known = await showRecord(id); } catch {  // unreachable (the header says so): try again
    setTimeout(() => { if (unitState === state) openUnit(id); }, 2000); return;
  }
  if (!known || unitState !== state) return;
  onChanged = (ids, more) => { if (more || ids.has(id) || [...ids].some((c) => state.children?.has(c))) refreshUnit(); };
  const held = await api(`/v1/units/${id}/retain`, {method: "POST", body: JSON.stringify({lease: 30})});
  if (held.ok && unitState === state) {
    state.lease = held.headers.get("location");
    $("#u-retain").textContent = "retained while open";
    state.renew = setInterval(() => renewRetain(state), 10000);
  } else if (held.ok) { api(held.headers.get("location"), {method: "DELETE"}); }
  // EventSource reconnects by itself and sends Last-Event-ID: the stream resumes where it left.
  const source = state.source = new EventSource(`/v1/units/${id}/events`);
  source.addEventListener("open", () => { if (unitState === state) connOk("live"); });
  source.addEventListener("error", () => { if (unitState !== state) return;
    if (source.readyState === EventSource.CLOSED) connBad("the event stream ended with an error: reload the page");
    else connBad("server unreachable: reconnecting"); });
  const out = $("#u-output");
  let partial = "";  // an agent's output is its JSONL transcript: show what it printed
  const show = (text) => {
    if (!state.transcript) return text;
    const lines = (partial + text).split("\n"); partial = lines.pop();
    return lines.map((l) => { try { const ev = JSON.parse(l);
      if (ev.type === "stdout" || ev.type === "stderr") return ev.data;
      if (ev.type === "result") return `[result] ${JSON.stringify(ev.value)}\n`;
      return `[${ev.type}${ev.message ? " " + ev.message : ""}]\n`; } catch { return l + "\n"; } }).join("");
  };
  // Output is bytes: a chunk may end inside a UTF-8 character (the server then sends
  // it as base64), so one streaming decoder turns the whole run of chunks into text.
  let decoder = new TextDecoder();
  const view = new OutputView(out, id);
  state.view = view;
  let next = 0;  // the output offset the next event starts at
  state.seen = () => next;  // bytes shown so far: the record counts them only at the end
  source.addEventListener("output", (e) => { const d = JSON.parse(e.data);
    if (d.offset < next) {  // a new attempt's output, from its start (the unit resumed)
      view.add(show(decoder.decode()));
      const note = document.createElement("span"); note.className = "gap";
      note.textContent = "[a new attempt: its output from the start]\n"; view.add(note);
    }
    next = d.offset + d.bytes;
    view.add(show(decoder.decode(bytesOf(d), {stream: true}))); });
  source.addEventListener("gap", (e) => { const d = JSON.parse(e.data); next = d.to;
    view.add(show(decoder.decode()));  // the bytes it held belong to what is gone
    const gap = document.createElement("span"); gap.className = "gap";
    gap.textContent = `[bytes ${d.from}-${d.to} are no longer kept]\n`; view.add(gap); });
  for (const kind of ["status", "progress", "checkpoint"]) source.addEventListener(kind, () => refreshUnit());
  source.addEventListener("end", () => { source.close(); view.add(show(decoder.decode())); refreshUnit(); });
}
const refreshUnit = coalesced(async () => { if (unitState) await showRecord(unitState.id); });
// A unit's sandbox in one line: its policy ({}: the default protection) and what of it this
// machine did not enforce; "" for a kind that runs no process here.
function sandboxText(s) {
  if (!s) return "";
  const p = s.policy || {};
  const said = p.none ? "none (no protection)" : Object.keys(p).length === 0 ? "default protection"
    : Object.entries(p).map(([k, v]) => `${k.replace(/_/g, " ")} ${Array.isArray(v) ? v.join(", ") || "nowhere" : v}`).join("; ");
  const missing = s.not_enforced || [];
  return missing.length ? `${said} (not enforced here: ${missing.join(", ")})` : said;
}
// The record and its details on the unit's page; false (and why, in its place) when there is none.
async function showRecord(id) {
  const r = await api(`/v1/units/${id}`);
  if (!unitState || unitState.id !== id) return false;
  if ([400, 404, 410].includes(r.status)) {  // malformed, unknown, expired: say which
    const problem = await r.json().catch(() => ({}));
    $("#unit-view").classList.add("missing");
    $("#u-missing").textContent = `${problem.title || r.status}: ${problem.detail || "no such unit"}`;
    return false;
  }
  if (!r.ok) return false;
  const u = await r.json();
  const more = await getJson(`/v1/units/${id}/details`).catch(() => null);
  if (!unitState || unitState.id !== id) return false;
  unitState.transcript = ["agent", "workflow", "dream", "teammate", "remote"].includes(u.kind);
  const duration = more && more.duration != null ? span(more.duration) : "";
  const fields = [["status", u.expired ? "expired" : u.status], ["kind", u.kind], ["description", u.description],
    ["parent", u.parent ? idLink(u.parent) : "", true], ["attempt", u.attempt], ["sandbox", sandboxText(u.sandbox)],
    ["progress", u.progress == null ? "" : `${Math.round(u.progress * 100)}% ${u.progress_message}`],
    ["created", when(u.created_at)], ["started", when(u.started_at)], ["ended", when(u.ended_at)],
    ["duration", duration], ["cause", u.cause], ["error", u.error],
    ["output bytes", Math.max(u.output_bytes, unitState.seen ? unitState.seen() : 0)],
    ["retried by", more && more.retried_by ? idLink(more.retried_by) : "", true]];
  $("#u-record").innerHTML = fields.filter(([, v]) => v !== "" && v != null)
    .map(([k, v, html]) => `<dt>${k}</dt><dd data-field="${k}">${html ? v : esc(v)}</dd>`).join("");
  const can = more ? more.can : {cancel: !u.terminal, kill: !u.terminal, signal: !u.terminal, retry: false};
  $("#b-cancel").disabled = !can.cancel; $("#b-kill").disabled = !can.kill;
  $("#b-signal").disabled = !can.signal; $("#b-retry").disabled = !can.retry;
  if (more) {
    $("#u-args").textContent = pretty(more.arguments);
    $("#u-result").textContent = more.has_result ? pretty(more.result) : u.terminal ? "(no value)" : "(not yet)";
    $("#u-checkpoint").textContent = more.checkpoint == null ? "(none)" : pretty(more.checkpoint);
    $("#u-timeline").innerHTML = more.timeline.map((e) => `<li data-what="${esc(e.what)}"><time>${when(e.at)}</time> ` +
      `<strong>${esc(e.what)}</strong> ${esc(e.detail || "")}${e.evidence ? ` <code>${esc(JSON.stringify(e.evidence).slice(0, 300))}</code>` : ""}</li>`).join("");
    unitState.children = new Set(more.children.map((c) => c.id));
    $("#u-children tbody").innerHTML = more.children.length ? more.children.map((c) => `<tr data-id="${esc(c.id)}"><td class="id">${idLink(c.id)}</td>` +
      `<td>${esc(c.kind)}</td><td class="status-${esc(c.status)}">${esc(c.status)}</td><td class="desc">${esc(c.description)}</td></tr>`).join("")
      : `<tr><td colspan="4" class="empty">no children</td></tr>`;
  }
  return true;
}
function closeUnit() {
  const state = unitState; unitState = null;
  if (!state) return;
  if (state.source) state.source.close();
  if (state.view) state.view.close();
  if (state.renew) clearInterval(state.renew);
  // keepalive: the release still goes out when the page itself is being left.
  if (state.lease) fetch(state.lease, {method: "DELETE", credentials: "same-origin", keepalive: true});
}
async function act(verb, body) {
  if (!unitState) return;
  const id = unitState.id;
  let r;
  try { r = await api(`/v1/units/${id}/${verb}`, {method: "POST", body}); } catch { return; }
  const said = await r.json().catch(() => ({}));
  if (!r.ok) { $("#u-said").textContent = `${said.title || r.status}: ${said.detail || ""}`; }
  else if (verb === "retry") { location.hash = `#/unit/${said.id}`; return; }
  else { $("#u-said").textContent = verb === "signals" ? "signal kept for the unit" : `${verb} sent`; }
  refreshUnit();
}

// -- routes --------------------------------------------------------------------------
const VIEWS = ["overview", "list", "unit", "schedules", "notices"];
function showView(name, nav) {
  for (const v of VIEWS) $(`#${v}-view`).hidden = v !== name;
  for (const a of document.querySelectorAll("nav a")) a.classList.toggle("current", a.dataset.nav === nav);
}
function route() {
  const m = location.hash.match(/^#\/unit\/([a-z][0-9a-z]{8})$/);
  listenForChanges();
  if (m) { showView("unit", "units"); openUnit(m[1]); return; }
  closeUnit();
  const page = (location.hash.match(/^#\/(\w+)/) || [])[1] || "overview";
  if (page === "units") {
    showView("list", "units"); listAfter = [null]; rows.clear(); $("#units tbody").innerHTML = "";
    onChanged = () => refreshList(); refreshList();
  } else if (page === "schedules") {
    showView("schedules", "schedules"); const go = coalesced(showSchedules); onChanged = go; go();
  } else if (page === "notices") {
    showView("notices", "notices"); const go = coalesced(showNotices); onChanged = go; go();
  } else {
    showView("overview", "overview");
    const go = coalesced(showOverview); onChanged = null; go();
    // Its samples come every 10 s: read them as often while it is shown and seen.
    overviewTimer = setInterval(() => { if (!document.hidden && !$("#overview-view").hidden) go(); }, 10000);
    return;
  }
  clearInterval(overviewTimer);
}
let overviewTimer = null;
window.addEventListener("hashchange", () => { clearInterval(overviewTimer); route(); });
window.addEventListener("pagehide", closeUnit);
$("#filters").addEventListener("submit", (e) => { e.preventDefault(); listAfter = [null]; refreshList(); });
$("#filters").addEventListener("reset", () => setTimeout(() => { listAfter = [null]; refreshList(); }, 0));
for (const f of ["#f-status", "#f-kind", "#f-order"]) $(f).addEventListener("change", () => { listAfter = [null]; refreshList(); });
$("#p-next").addEventListener("click", () => { listAfter.push($("#p-next").dataset.next); refreshList(); });
$("#p-first").addEventListener("click", () => { listAfter = [null]; refreshList(); });
$("#sel-all").addEventListener("change", (e) => {
  for (const [id, tr] of rows) { tr.querySelector(".sel").checked = e.target.checked;
    if (e.target.checked) selected.add(id); else selected.delete(id); }
  bulkButtons(); });
// A click anywhere on a row opens it, unless it ends a text selection (copying an ID)
// or lands on its checkbox or link.
$("#units tbody").addEventListener("click", (e) => { const tr = e.target.closest("tr[data-id]");
  if (tr && !e.target.closest("a, input") && !String(getSelection())) location.hash = `#/unit/${tr.dataset.id}`; });
$("#b-bulk-cancel").addEventListener("click", () => bulk("cancel"));
$("#b-bulk-kill").addEventListener("click", () => bulk("kill"));
$("#b-cancel").addEventListener("click", () => act("cancel", JSON.stringify({grace: 2})));
$("#b-kill").addEventListener("click", () => act("kill"));
$("#b-retry").addEventListener("click", () => act("retry"));
$("#signal-form").addEventListener("submit", (e) => { e.preventDefault();
  let value;
  try { value = JSON.parse($("#s-value").value || "null"); } catch { $("#u-said").textContent = "the value is not JSON"; return; }
  act("signals", JSON.stringify({name: $("#s-name").value, value})); });
// "/" searches, as in most consoles.
document.addEventListener("keydown", (e) => {
  if (e.key === "/" && !/INPUT|SELECT|TEXTAREA/.test(document.activeElement.tagName)) {
    e.preventDefault(); location.hash = "#/units"; setTimeout(() => $("#f-q").focus(), 0); } });
route();
