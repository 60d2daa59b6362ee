// The web view: a live table of units and a page per unit. No build step, no CDN.
// Auth is the HttpOnly cookie set by /?token=...; fetch sends it, and Origin, itself.
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
const age = (t) => { const s = Math.max(0, Date.now() / 1000 - t);
  return s < 60 ? `${s.toFixed(0)}s` : s < 3600 ? `${(s / 60).toFixed(0)}m` : `${(s / 3600).toFixed(1)}h`; };
// A running unit's bar and the age of its last report (a stall shows); an ended
// unit's last percentage would read as work still to do, so it shows none.
const bar = (u) => {
  if (u.progress == null && !u.progress_message) return "";
  const ended = u.terminal;  // the server's is_terminal(): no status list here
  const fill = ended || u.progress == null ? "" :
    `<span class="bar" role="progressbar" aria-label="progress" aria-valuemin="0" aria-valuemax="100" ` +
    `aria-valuenow="${Math.round(u.progress * 100)}"><span data-width="${Math.round(u.progress * 100)}"></span></span>`;
  const when = !ended && u.progress_at ? `<span class="age">${age(u.progress_at)} ago</span> ` : "";
  return `${fill}${when}<span class="msg">${esc(u.progress_message)}</span>`;
};

// The list is polled, one request at a time: every second while the tab is seen,
// every two while the server does not answer, and not at all while the tab is
// hidden (it refreshes the moment it is shown again). Each poll asks for the
// page the table shows, no more.
let listTimer = null;
const POLL = 1000;
const SHOWN = 500;  // rows in the table: the newest units
const listShown = () => $("#unit-view").hidden;
function pollListIn(delay) { clearTimeout(listTimer); listTimer = setTimeout(pollList, delay); }
async function pollList() {
  if (document.hidden || !listShown()) return;
  try { await refreshList(); } finally { if (listShown() && !document.hidden) pollListIn(downSince ? 2 * POLL : POLL); }
}
document.addEventListener("visibilitychange", () => {
  if (document.hidden) clearTimeout(listTimer); else if (listShown()) pollListIn(0);
});
async function refreshList() {
  const params = new URLSearchParams({limit: String(SHOWN), order: "newest"});
  if ($("#f-status").value) params.set("status", $("#f-status").value);
  if ($("#f-kind").value) params.set("kind", $("#f-kind").value);
  let r;
  try { r = await api(`/v1/units?${params}`); } catch { return; }  // the header says so
  if (!r.ok) { if (r.status !== 401) connBad(`the server answered ${r.status}`); return; }
  const page = await r.json();
  let units = page.items;  // newest first
  const depth = {};
  if ($("#f-tree").checked) units = treeOrder(units, depth);
  showRows(units, depth);
  connOk(`live · ${page.next ? `the newest ${units.length}` : units.length} units`);
}
// The table is updated in place: a row per unit, kept while the unit is shown,
// and a cell is rewritten only when what it shows changed, so a selection (an
// ID being copied) and the keyboard focus survive the refreshes.
const rows = new Map();  // unit ID -> its <tr>
function showRows(units, depth) {
  const tbody = $("#units tbody");
  const shown = new Set(units.map((u) => u.id));
  // Rows no longer shown go first: a row left above a kept one would make the kept
  // one move, and a moved row loses the keyboard focus.
  for (const [id, tr] of rows) if (!shown.has(id)) { tr.remove(); rows.delete(id); }
  let prev = null;
  for (const u of units) {
    let tr = rows.get(u.id);
    if (!tr) { tr = newRow(u.id); rows.set(u.id, tr); }
    fillRow(tr, u, depth[u.id] || 0);
    const at = prev ? prev.nextSibling : tbody.firstChild;
    if (at !== tr) tbody.insertBefore(tr, at);
    prev = tr;
  }
}
function newRow(id) {
  const tr = document.createElement("tr"); tr.dataset.id = id;
  tr.innerHTML = `<td class="id"><span class="branch"></span><a href="#/unit/${esc(id)}">${esc(id)}</a></td>` +
    "<td></td><td></td><td></td><td class=\"progress\"></td><td class=\"desc\"></td>";
  return tr;
}
const setCell = (td, html) => { if (td.dataset.html !== html) { td.innerHTML = html; td.dataset.html = html; return true; } return false; };
function fillRow(tr, u, depth) {
  const [id, kind, status, made, progress, desc] = tr.cells;
  tr.className = `row-${u.status}`;
  id.style.paddingLeft = `${8 + 18 * depth}px`;  // the CSSOM: the policy refuses style attributes
  setCell(id.firstChild, depth ? "└ " : "");
  setCell(kind, esc(u.kind));
  status.className = `status-${u.status}`;
  setCell(status, esc(u.expired ? "expired" : u.status));
  setCell(made, age(u.created_at));
  if (setCell(progress, bar(u))) for (const el of progress.querySelectorAll("[data-width]")) el.style.width = `${el.dataset.width}%`;
  setCell(desc, esc(u.description));
}
function treeOrder(units, depth) {  // parents before their children, children indented
  const byParent = {}; const ids = new Set(units.map((u) => u.id)); const out = [];
  for (const u of units) { const p = ids.has(u.parent) ? u.parent : ""; (byParent[p] ||= []).push(u); }
  const walk = (p, d) => { for (const u of byParent[p] || []) { depth[u.id] = d; out.push(u); walk(u.id, d + 1); } };
  walk("", 0);
  return out;
}

const encoder = new TextEncoder();
// An output event's bytes: its text (valid UTF-8, so encoding gives them back) or base64.
const bytesOf = (d) => d.text != null ? encoder.encode(d.text)
  : Uint8Array.from(atob(d.base64), (c) => c.charCodeAt(0));

let unitState = null;  // {id, source, lease, renew}
async function openUnit(id) {
  closeUnit();
  $("#list-view").hidden = true; $("#unit-view").hidden = false;
  $("#u-title").textContent = id; $("#u-output").textContent = ""; $("#u-record").innerHTML = "";
  $("#unit-view").classList.remove("missing"); $("#u-retain").textContent = "";
  const state = unitState = {id, source: null, lease: null, renew: null};
  let known;
  try { known = await showRecord(id); } catch {  // unreachable (the header says so): try again
    setTimeout(() => { if (unitState === state) openUnit(id); }, 2000); return;
  }
  if (!known || unitState !== state) return;
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
      return ev.type === "stdout" || ev.type === "stderr" ? ev.data
        : `[${ev.type}${ev.message ? " " + ev.message : ""}]\n`; } catch { return l + "\n"; } }).join("");
  };
  // Output is bytes: a chunk may end inside a UTF-8 character (the server then sends
  // it as base64), so one streaming decoder turns the whole run of chunks into text.
  let decoder = new TextDecoder();
  const view = new OutputView(out, id);
  state.view = view;
  let next = 0;  // the output offset the next event starts at
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
  const reshow = () => showRecord(id).catch(() => {});  // unreachable: the header says so
  for (const kind of ["status", "progress"]) source.addEventListener(kind, reshow);
  source.addEventListener("end", () => { source.close(); view.add(show(decoder.decode())); reshow(); });
}

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
// The record on the unit's page; false (and why, in its place) when there is none.
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
  unitState.transcript = ["agent", "workflow", "dream", "teammate", "remote"].includes(u.kind);
  const rows = [["status", u.expired ? "expired" : u.status], ["kind", u.kind], ["description", u.description],
    ["parent", u.parent], ["attempt", u.attempt], ["progress", u.progress == null ? "" : `${Math.round(u.progress * 100)}% ${u.progress_message}`],
    ["created", new Date(u.created_at * 1000).toLocaleString()], ["cause", u.cause], ["error", u.error], ["output bytes", u.output_bytes]];
  $("#u-record").innerHTML = rows.map(([k, v]) => `<dt>${k}</dt><dd data-field="${k}">${esc(v)}</dd>`).join("");
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
async function act(verb) {
  if (!unitState) return;
  const body = verb === "cancel" ? JSON.stringify({grace: 2}) : undefined;
  try { await api(`/v1/units/${unitState.id}/${verb}`, {method: "POST", body}); } catch { return; }
  showRecord(unitState.id).catch(() => {});
}

function route() {
  const m = location.hash.match(/^#\/unit\/([a-z][0-9a-z]{8})$/);
  clearTimeout(listTimer);
  if (m) { $("#unit-view").hidden = false; openUnit(m[1]); return; }
  closeUnit();
  $("#list-view").hidden = false; $("#unit-view").hidden = true;
  pollListIn(0);
}
// A click anywhere on a row opens it, unless it ends a text selection (copying an ID).
$("#units tbody").addEventListener("click", (e) => { const tr = e.target.closest("tr[data-id]");
  if (tr && !e.target.closest("a") && !String(getSelection())) location.hash = `#/unit/${tr.dataset.id}`; });
for (const f of ["#f-status", "#f-kind", "#f-tree"]) $(f).addEventListener("change", refreshList);
$("#b-cancel").addEventListener("click", () => act("cancel"));
$("#b-kill").addEventListener("click", () => act("kill"));
window.addEventListener("hashchange", route);
window.addEventListener("pagehide", closeUnit);
route();
