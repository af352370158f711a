// code-runner dashboard: live parts and charts. Every text from a record is set with
// textContent, never as HTML.
"use strict";

function cell(row, text, cls) {
  const td = document.createElement("td");
  td.textContent = text == null ? "" : String(text);
  if (cls) td.className = cls;
  row.appendChild(td);
}

function eventText(e) {
  return e.step || e.reason || e.summary || e.name || e.label || "";
}

function followTask(table) {
  const url = table.dataset.stream;
  if (!url) return;
  const source = new EventSource(url + "?offset=" + table.dataset.offset);
  const body = table.querySelector("tbody");
  const box = table.closest(".events-box");
  source.addEventListener("event", (msg) => {
    const e = JSON.parse(msg.data);
    const row = document.createElement("tr");
    row.className = "fresh";
    cell(row, e.elapsed_s, "nowrap muted");
    cell(row, e.round);
    cell(row, e.kind, "ev-kind");
    cell(row, eventText(e), "ev-text");
    body.appendChild(row);
    if (box) box.scrollTop = box.scrollHeight;
  });
  source.addEventListener("status", (msg) => {
    const s = JSON.parse(msg.data);
    const state = document.getElementById("run-state");
    if (state && s.state) { state.textContent = s.state; state.className = "status s-" + s.state; }
    const step = document.getElementById("run-step");
    if (step) step.textContent = s.step || "";
  });
  source.addEventListener("end", () => {
    source.close();
    const note = document.createElement("p");
    note.className = "notice";
    note.textContent = "The run has finished. ";
    const link = document.createElement("a");
    link.href = window.location.pathname;
    link.textContent = "Reload for the result, the patch and the decisions.";
    note.appendChild(link);
    table.closest("section").prepend(note);
  });
}

function followRuns(holder) {
  const source = new EventSource(holder.dataset.liveUrl);
  source.addEventListener("changed", async () => {
    const response = await fetch(holder.dataset.tableUrl + window.location.search);
    if (response.ok) holder.innerHTML = await response.text();  // server-rendered, escaped
  });
}

function diffModes() {
  document.querySelectorAll("input[name=diff-mode]").forEach((radio) => {
    radio.addEventListener("change", () => {
      const split = radio.value === "split" && radio.checked;
      document.querySelectorAll("table.diff.unified").forEach((t) => { t.hidden = split; });
      document.querySelectorAll("table.diff.split").forEach((t) => { t.hidden = !split; });
    });
  });
}

const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#65a30d", "#db2777"];

function chartWidth(el) { return Math.max(320, el.clientWidth || 800); }

function drawChart(el, xs, named, opts) {
  el.textContent = "";
  const names = Object.keys(named);
  const series = [{ label: opts.xLabel || "step" }].concat(names.map((n, i) => ({
    label: n, stroke: COLORS[i % COLORS.length], width: 2, points: { show: xs.length < 200 },
  })));
  const data = [xs].concat(names.map((n) => named[n]));
  const chart = new uPlot({
    width: chartWidth(el), height: 300, series: series,
    scales: { x: { time: false }, y: opts.log ? { distr: 3 } : {} },
    axes: [{ label: opts.xLabel || "step" }, { label: opts.yLabel || "" }],
    cursor: { drag: { x: true, y: false } },
  }, data, el);
  el.dataset.points = String(xs.length);
  return chart;
}

// Align several [xs, ys] series on one x axis (union of the x values; gaps are null).
function align(seriesByName) {
  const xsSet = new Set();
  Object.values(seriesByName).forEach(([xs]) => xs.forEach((x) => xsSet.add(x)));
  const xs = Array.from(xsSet).sort((a, b) => a - b);
  const named = {};
  Object.entries(seriesByName).forEach(([name, [sx, sy]]) => {
    const at = new Map(sx.map((x, i) => [x, sy[i]]));
    named[name] = xs.map((x) => (at.has(x) ? at.get(x) : null));
  });
  return [xs, named];
}

function positive(named) {
  const out = {};
  Object.entries(named).forEach(([k, v]) => { out[k] = v.map((y) => (y != null && y > 0 ? y : null)); });
  return out;
}

let chosenMetrics = null;  // the person's picks survive a live redraw
let drawnPoints = -1;

async function execCharts() {
  const el = document.getElementById("metric-chart");
  if (!el) return;
  const response = await fetch(el.dataset.url);
  if (!response.ok) return;
  const data = await response.json();
  ["stdout", "stderr"].forEach((name) => {
    const pre = document.getElementById(name + "-tail");
    if (pre && data[name + "_tail"]) { pre.textContent = data[name + "_tail"]; pre.scrollTop = pre.scrollHeight; }
  });
  const metrics = data.metrics || {};
  const names = Object.keys(metrics);
  const points = names.reduce((n, k) => n + metrics[k][0].length, 0);
  if (points === drawnPoints) return;
  drawnPoints = points;
  const log = document.getElementById("log-scale");
  const picks = document.getElementById("metric-picks");
  if (chosenMetrics === null || !chosenMetrics.size) {
    chosenMetrics = new Set(names.filter((n) => /loss/i.test(n)));
    if (!chosenMetrics.size && names.length) chosenMetrics.add(names[0]);
  }
  const chosen = chosenMetrics;
  picks.textContent = "";
  names.forEach((name) => {
    const label = document.createElement("label");
    const box = document.createElement("input");
    box.type = "checkbox"; box.checked = chosen.has(name); box.value = name;
    box.addEventListener("change", () => { box.checked ? chosen.add(name) : chosen.delete(name); draw(); });
    label.appendChild(box);
    label.appendChild(document.createTextNode(" " + name));
    picks.appendChild(label);
  });
  function draw() {
    document.getElementById("metric-none").hidden = names.length > 0;
    if (!names.length) return;
    const wanted = {};
    names.filter((n) => chosen.has(n)).forEach((n) => { wanted[n] = metrics[n]; });
    let [xs, named] = align(wanted);
    if (log.checked) named = positive(named);
    drawChart(el, xs, named, { log: log.checked, xLabel: "step" });
  }
  log.onchange = draw;
  draw();
  const mem = data.memory || [[], [], []];
  const memEl = document.getElementById("memory-chart");
  if (mem[0].length) {
    const named = { "RSS (MiB)": mem[1] };
    if (mem[2].some((v) => v != null)) named["PSS (MiB)"] = mem[2];
    drawChart(memEl, mem[0], named, { xLabel: "seconds", yLabel: "MiB" });
  } else {
    document.getElementById("memory-none").hidden = liveMemory[0].length > 1;
  }
}

const liveMemory = [[], []];  // (elapsed s, RSS MiB) from the live status, until the record has samples

function drawLiveMemory() {
  const memEl = document.getElementById("memory-chart");
  if (memEl && liveMemory[0].length > 1) {
    document.getElementById("memory-none").hidden = true;
    drawChart(memEl, liveMemory[0], { "RSS (MiB), live": liveMemory[1] }, { xLabel: "seconds", yLabel: "MiB" });
  }
}

let pendingShown = null;  // the alert whose buttons are on the page ("" for none)

// A new alert waiting (or none any more), or an answer given: the server renders the
// buttons and the answers, htmx wires them.
async function refreshPending(s, force) {
  const holder = document.getElementById("pending-holder");
  if (!holder) return;
  if (pendingShown === null) pendingShown = holder.querySelector("#pending-alert").dataset.alert;
  const now = s && s.pending_alert && s.pending_check_no != null ? s.pending_alert + "-" + s.pending_check_no : "";
  const same = now === pendingShown || (now && pendingShown && now.split("-")[0] === pendingShown.split("-")[0]);
  if (!force && same) return;
  if (!force) pendingShown = now;
  const response = await fetch(holder.dataset.url);
  if (!response.ok) return;
  holder.innerHTML = await response.text();  // server-rendered, escaped
  htmx.process(holder);
}

document.addEventListener("htmx:afterSwap", (e) => {
  if (e.target && e.target.id === "answer-output") refreshPending(null, true);
});

function followExec(table) {
  const url = table.dataset.stream;
  if (!url) return;
  const source = new EventSource(url + "?offset=" + table.dataset.offset);
  let chartAt = Date.now();
  source.addEventListener("status", (msg) => {
    const s = JSON.parse(msg.data);
    if (typeof s.elapsed_s === "number" && typeof s.rss_bytes === "number" && s.rss_bytes > 0) {
      liveMemory[0].push(s.elapsed_s); liveMemory[1].push(s.rss_bytes / 1048576);
    }
    if (Date.now() - chartAt > 2000) {  // live points
      chartAt = Date.now(); execCharts(); drawLiveMemory();
    }
    table.querySelectorAll("[data-field]").forEach((td) => {
      let v = s[td.dataset.field];
      if (td.dataset.field === "rss_bytes" && typeof v === "number") v = (v / 1048576).toFixed(1) + " MiB";
      if (td.dataset.field === "elapsed_s" && typeof v === "number") v = v.toFixed(1) + " s";
      td.textContent = v == null ? "none" : String(v);
    });
    const state = document.getElementById("run-state");
    if (state && s.state) { state.textContent = s.state; state.className = "status s-" + s.state; }
    refreshPending(s);
  });
  source.addEventListener("event", (msg) => {
    const e = JSON.parse(msg.data);
    if (e.kind === "alert" || e.kind === "alert_repeated") {
      const list = document.getElementById("alerts");
      list.querySelectorAll(".none").forEach((n) => n.remove());
      const item = document.createElement("li");
      const badge = document.createElement("span");
      badge.className = "badge warn"; badge.textContent = e.alert || e.kind;
      item.appendChild(badge);
      item.appendChild(document.createTextNode(" " + (e.detail || "")));
      list.appendChild(item);
    }
  });
  source.addEventListener("end", () => { source.close(); window.location.reload(); });
}

function compareChart() {
  const holder = document.getElementById("compare-data");
  if (!holder) return;
  const runs = JSON.parse(holder.textContent);
  const select = document.getElementById("compare-metric");
  const names = new Set();
  Object.values(runs).forEach((m) => Object.keys(m).forEach((n) => names.add(n)));
  Array.from(names).sort().forEach((n) => {
    const o = document.createElement("option"); o.value = n; o.textContent = n; select.appendChild(o);
  });
  const log = document.getElementById("log-scale");
  function draw() {
    const wanted = {};
    Object.entries(runs).forEach(([run, m]) => { if (m[select.value]) wanted[run] = m[select.value]; });
    let [xs, named] = align(wanted);
    if (log.checked) named = positive(named);
    drawChart(document.getElementById("compare-chart"), xs, named, { log: log.checked });
  }
  select.addEventListener("change", draw);
  log.addEventListener("change", draw);
  if (names.size) draw();
}

document.addEventListener("DOMContentLoaded", () => {
  const events = document.getElementById("events");
  if (events) followTask(events);
  const runs = document.getElementById("runs-table");
  if (runs) followRuns(runs);
  const live = document.getElementById("live-status");
  if (live) followExec(live);
  document.querySelectorAll("pre.log").forEach((pre) => { pre.scrollTop = pre.scrollHeight; });
  diffModes();
  execCharts();
  compareChart();
});
