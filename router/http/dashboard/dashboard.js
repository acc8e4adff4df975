// baton-router's live page: draws the data the router put into the page at once, then polls
// /dashboard/data (router/http/dashboard.h) and draws it with uPlot. Legends show each series'
// latest value unless the pointer is over the chart. Once every chart has drawn at least one data
// point, <body> gets data-charts-with-data = the
// number of charts and each chart's panel data-rect = its canvas's x,y,w,h in CSS pixels (the
// dashboard test reads both from the DOM and the screenshot).
"use strict";

const POLL_MS = 1500;
const MIN_BUCKETS = 12;  // time charts show at least this many buckets (a minute at 5 s)
const COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b"];
const charts = {};  // panel id -> {plot, key}

function panelWidth(id) {
  return document.getElementById(id).clientWidth - 18;
}

const fixed = digits => (u, v) => (v === null || v === undefined) ? "–" : v.toFixed(digits);

// A time series; no line across buckets without data (null), so idle gaps stay gaps.
function line(label, color, extra) {
  return Object.assign({label, stroke: color, width: 2, spanGaps: false, value: fixed(2),
                        points: {show: true, size: 8, fill: color}}, extra || {});
}

// Per series, the index of its last value (null when it has none); the x series takes the latest.
function lastIndexes(data) {
  const idxs = data.map(s => {
    for (let i = s.length - 1; i >= 0; --i) if (s[i] !== null && s[i] !== undefined && !Number.isNaN(s[i])) return i;
    return null;
  });
  const found = idxs.slice(1).filter(i => i !== null);
  idxs[0] = found.length ? Math.max(...found) : null;
  return idxs;
}

// With the pointer off the chart the legend shows the latest values, not "--".
function showLatest(u) {
  if (u.cursor.idx !== null && u.cursor.idx !== undefined) return;
  const idxs = lastIndexes(u.data);
  if (idxs[0] !== null) u.setLegend({idxs}, false);
}

// Makes the chart anew when its series change (methods appear, k changes), else updates its data.
function draw(id, key, makeOpts, data) {
  const panel = document.getElementById(id);
  const c = charts[id];
  if (c && c.key === key) {
    c.plot.setData(data);
  } else {
    if (c) c.plot.destroy();
    const opts = Object.assign({width: panelWidth(id), height: 210, legend: {show: true, live: true},
                                hooks: {setLegend: [showLatest], draw: [u => markRect(panel, u)]}}, makeOpts());
    charts[id] = {plot: new uPlot(opts, data, panel), key};
  }
  showLatest(charts[id].plot);
  const hasData = data.slice(1).some(s => s.some(v => v !== null && v !== undefined && !Number.isNaN(v)));
  panel.dataset.hasData = hasData ? "1" : "0";
}

// Where the chart's canvas is, once uPlot has laid it out and drawn (its draw hook).
function markRect(panel, u) {
  const r = u.over.getBoundingClientRect();
  panel.dataset.rect = [r.left, r.top, r.width, r.height].map(Math.round).join(",");
}

function timeAxes(yLabel) {
  return [{}, {label: yLabel, size: 60}];
}

function render(d) {
  document.getElementById("model").textContent = d.model ? "model " + d.model : "";
  for (const el of document.querySelectorAll(".window")) el.textContent = d.window_s;
  for (const el of document.querySelectorAll(".bucket")) el.textContent = d.bucket_s;
  // Time charts start at the first bucket with anything in it (at least MIN_BUCKETS back), so a
  // cluster that just started does not draw a few points at the edge of five empty minutes.
  const q0 = d.requests, spec0 = d.speculation;
  const busy = i => q0.requests[i] > 0 || spec0.methods.some(m => m.acceptance_rate[i] !== null);
  let start = q0.t.findIndex((_, i) => busy(i));
  start = Math.max(0, Math.min(start < 0 ? q0.t.length : start, q0.t.length - MIN_BUCKETS));
  const cut = a => a.slice(start);
  const q = Object.fromEntries(Object.entries(q0).map(([k, v]) => [k, cut(v)]));
  const spec = Object.assign({}, spec0, {t: cut(spec0.t)});
  const methods = spec0.methods.map(m => Object.assign({}, m, {acceptance_rate: cut(m.acceptance_rate)}));

  draw("acceptance", "acc:" + methods.map(m => m.method).join(","), () => ({
    scales: {y: {range: [0, 1]}},
    axes: timeAxes("accepted / draft tokens"),
    series: [{}].concat(methods.map((m, i) => line(m.method, COLORS[i % COLORS.length]))),
  }), [spec.t].concat(methods.map(m => m.acceptance_rate)));

  // Positions from 0, as Prometheus's position label.
  const k = Math.max(1, ...methods.map(m => m.num_speculative_tokens));
  const positions = Array.from({length: k}, (_, i) => i);
  draw("positions", "pos:" + k + ":" + methods.map(m => m.method).join(","), () => ({
    scales: {x: {time: false, range: [-0.5, k - 0.5]}, y: {range: [0, 1]}},
    axes: [{label: "draft position", incrs: [1], values: (u, v) => v.map(x => Number.isInteger(x) ? x : "")},
           {label: "accepted / drafts", size: 60}],
    series: [{label: "position", value: fixed(0)}].concat(methods.map((m, i) => ({
      label: m.method, stroke: COLORS[i % COLORS.length], fill: COLORS[i % COLORS.length] + "66", width: 2,
      value: fixed(2),
      // Several methods: nested bars, each narrower than the one before, so all stay visible.
      paths: uPlot.paths.bars({size: [0.7 - 0.5 * i / Math.max(1, methods.length), 120]}),
      points: {show: false},
    }))),
  }), [positions].concat(methods.map(m => positions.map((_, i) => {
    const r = m.window.per_position_rates;
    return i < r.length ? r[i] : null;
  }))));

  const ms = {value: fixed(1)};
  draw("ttft", "ttft", () => ({axes: timeAxes("ms"),
    series: [{}, line("p50", COLORS[0], ms), line("p99", COLORS[1], ms)]}), [q.t, q.ttft_p50_ms, q.ttft_p99_ms]);
  draw("tpot", "tpot", () => ({axes: timeAxes("ms"),
    series: [{}, line("p50", COLORS[0], ms), line("p99", COLORS[1], ms)]}), [q.t, q.tpot_p50_ms, q.tpot_p99_ms]);
  // Buckets without requests are zero throughput, not unknown.
  draw("throughput", "tput", () => ({
    scales: {tok: {}, req: {}},
    axes: [{}, {scale: "tok", label: "output tokens/s", size: 60}, {scale: "req", side: 1, label: "requests/s", size: 50, grid: {show: false}}],
    // Tokens/s as an area and requests/s dashed: with steady request lengths the two coincide.
    series: [{}, line("output tokens/s", COLORS[2], {scale: "tok", fill: COLORS[2] + "33", spanGaps: true, value: fixed(1)}),
             line("requests/s", COLORS[3], {scale: "req", dash: [6, 4], spanGaps: true})],
  }), [q.t, q.output_tokens_per_s, q.requests_per_s]);

  const bySpec = new Map(spec.nodes.map(n => [n.address, n]));
  const text = v => String(v ?? "").replace(/[&<>"]/g, c => ({"&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;"})[c]);
  const rows = d.nodes.map(n => {
    const s = bySpec.get(n.address);
    const fmt = v => (v === null || v === undefined) ? "–" : v.toFixed(2);
    const k = n.num_speculative_tokens ? n.num_speculative_tokens + (n.adaptive_draft_length ? " (adaptive)" : "") : "";
    const proposer = !n.method || n.method === "none" ? "" : n.proposer_endpoint ? "sidecar " + n.proposer_endpoint : "on the node";
    return `<tr><td>${text(n.kind)} ${text(n.address)}</td><td>${n.usable ? "yes" : "no: " + text(n.problem)}</td>` +
           `<td>${text(n.method)}</td><td>${text(k)}</td><td>${text(proposer)}</td><td>${n.num_running ?? ""}</td>` +
           `<td>${s ? fmt(s.window.acceptance_rate) : ""}</td><td>${s ? fmt(s.window.mean_acceptance_length) : ""}</td></tr>`;
  });
  document.querySelector("#nodes tbody").innerHTML = rows.join("");

  const drawn = Object.keys(charts).filter(id => document.getElementById(id).dataset.hasData === "1").length;
  document.body.dataset.chartsWithData = String(drawn);
  document.title = `Baton dashboard (${drawn}/${Object.keys(charts).length} charts with data)`;
}

function showStatus(message, error) {
  const status = document.getElementById("status");
  status.textContent = message;
  status.className = error ? "error" : "";
}

async function poll() {
  try {
    const res = await fetch("/dashboard/data", {cache: "no-store"});
    if (!res.ok) throw new Error("HTTP " + res.status);
    render(await res.json());
    showStatus("updated " + new Date().toLocaleTimeString());
  } catch (e) {
    showStatus("cannot reach the router: " + e.message, true);
  }
  setTimeout(poll, POLL_MS);
}

// The data the page was served with: drawn before the first poll returns.
function renderInitial() {
  const el = document.getElementById("initial-data");
  let d = null;
  try { d = el ? JSON.parse(el.textContent) : null; } catch (e) { d = null; }
  if (!d || typeof d !== "object") return;
  render(d);
  showStatus("as of " + new Date(d.generated_at * 1000).toLocaleTimeString());
}

renderInitial();
setTimeout(poll, POLL_MS);
