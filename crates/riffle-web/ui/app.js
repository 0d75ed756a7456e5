// The job's web UI: polls the REST API every second and draws the job graph (coloured by
// back-pressure), charts of the last minutes, counters, the operator and checkpoint tables.
"use strict";

const SVG = "http://www.w3.org/2000/svg";
const $ = (id) => document.getElementById(id);
let token = sessionStorage.getItem("riffle-token") || "";

function el(tag, attrs, text) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs || {})) node.setAttribute(k, v);
  if (text !== undefined) node.textContent = text;
  return node;
}

function fmt(n) {
  if (n === null || n === undefined) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + "K";
  return Number.isInteger(n) ? String(n) : n.toFixed(1);
}

function duration(ms) {
  if (ms === null || ms === undefined) return "–";
  if (ms < 0) return "-" + duration(-ms);
  if (ms < 1000) return ms + " ms";
  const s = ms / 1000;
  if (s < 120) return s.toFixed(1) + " s";
  if (s < 7200) return (s / 60).toFixed(1) + " min";
  if (s < 172800) return (s / 3600).toFixed(1) + " h";
  return (s / 86400).toFixed(1) + " d";
}

// The watermark's lag where it means something: behind the wall clock when event time follows
// it; else (the API's event_time is "synthetic": a generator's fixed base, a replay of old data)
// behind the newest record the sources read, since a lag of days behind the wall clock would
// only read as an alarm. `o` is an operator or the job.
function watermarkLag(o) {
  if (o.event_time !== "synthetic") {
    return { text: duration(o.watermark_lag_ms), synthetic: false, title: "how far the watermark is behind the wall clock" };
  }
  const read = o.newest_event_behind_wall_clock_ms;
  const where = read === undefined || read === null ? "far from the wall clock"
    : `${duration(Math.abs(read))} ${read < 0 ? "ahead of" : "behind"} the wall clock`;
  return {
    text: o.watermark_lag_behind_newest_ms === null || o.watermark_lag_behind_newest_ms === undefined ? "–"
      : duration(o.watermark_lag_behind_newest_ms) + " behind newest record",
    synthetic: true,
    title: `synthetic event time: the newest record was read ${where}, so the lag behind the wall clock ` +
      `(${duration(o.watermark_lag_ms)}) says nothing; shown: how far the watermark is behind the newest record`,
  };
}

function lagCell(o) {
  const lag = watermarkLag(o);
  const span = document.createElement("span");
  span.className = "watermark-lag";
  span.textContent = lag.text;
  span.title = lag.title;
  span.dataset.eventTime = o.event_time || "";
  return span;
}

function bytes(n) {
  if (!n) return "0 B";
  const units = ["B", "KB", "MB", "GB", "TB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return n.toFixed(i ? 1 : 0) + " " + units[i];
}

async function get(path) {
  const response = await fetch(path);
  if (!response.ok) throw new Error(path + ": HTTP " + response.status);
  return response.json();
}

function show(message, isError) {
  const box = $("message");
  box.textContent = message;
  box.className = "message" + (isError ? " error" : "");
  box.hidden = !message;
}

async function control(path, body, what) {
  show(what + "…");
  for (;;) {
    // JSON plus a custom header: a request no other site can make a browser send.
    const headers = { "content-type": "application/json", "x-riffle-request": "1" };
    if (token) headers.authorization = "Bearer " + token;
    const response = await fetch(path, { method: "POST", headers, body: JSON.stringify(body) });
    const answer = await response.json().catch(() => ({}));
    if (response.status === 401) {
      const given = prompt("This job's control endpoints need its token:");
      if (!given) { show("not authorised", true); return; }
      token = given;
      sessionStorage.setItem("riffle-token", token);
      continue;
    }
    if (response.status === 400 && /no target_directory/.test(answer.error || "")) {
      const dir = prompt("The job has no default savepoint directory. Savepoint directory (absolute path or s3://bucket/prefix):");
      if (!dir) { show(what + " cancelled"); return; }
      body = Object.assign({}, body, { target_directory: dir });
      continue;
    }
    if (!response.ok) { show(what + " failed: " + (answer.error || response.status), true); return; }
    const where = answer.location || answer.savepoint;
    show(what + " done" + (where ? ": " + where : ""));
    return;
  }
}

$("btn-savepoint").onclick = () => control("/api/v1/job/savepoints", {}, "Savepoint");
$("btn-stop").onclick = () => {
  if (confirm("Take a savepoint and stop the job?")) control("/api/v1/job/stop", { savepoint: true }, "Stop with savepoint");
};
$("btn-cancel").onclick = () => {
  if (confirm("Cancel the job? Its tasks stop now.")) control("/api/v1/job/cancel", {}, "Cancel");
};

/// Layers vertices by their longest path from a source, left to right.
function layout(graph) {
  const layer = graph.vertices.map(() => 0);
  for (let round = 0; round < graph.vertices.length; round++) {
    for (const e of graph.edges) layer[e.to] = Math.max(layer[e.to], layer[e.from] + 1);
  }
  const rows = {};
  return graph.vertices.map((v, i) => {
    const row = rows[layer[i]] = (rows[layer[i]] || 0) + 1;
    return { x: layer[i], y: row - 1 };
  });
}

function drawGraph(graph, bottleneck) {
  const svg = $("graph");
  svg.replaceChildren();
  const defs = el("defs");
  const marker = el("marker", { id: "arrow", viewBox: "0 0 10 10", refX: 10, refY: 5, markerWidth: 7, markerHeight: 7, orient: "auto" });
  marker.appendChild(el("path", { d: "M0,0 L10,5 L0,10 z", fill: "#8895a3" }));
  defs.appendChild(marker);
  svg.appendChild(defs);
  const pos = layout(graph);
  const W = 320, H = 76, GX = 70, GY = 24;
  const at = (i) => ({ x: 10 + pos[i].x * (W + GX), y: 10 + pos[i].y * (H + GY) });
  const layers = Math.max(1, ...pos.map((p) => p.x + 1));
  const rows = Math.max(1, ...pos.map((p) => p.y + 1));
  svg.setAttribute("viewBox", `0 0 ${layers * (W + GX)} ${rows * (H + GY) + 10}`);
  svg.style.height = Math.min(420, rows * (H + GY) + 20) + "px";
  for (const e of graph.edges) {
    const a = at(e.from), b = at(e.to);
    const x1 = a.x + W, y1 = a.y + H / 2, x2 = b.x, y2 = b.y + H / 2;
    svg.appendChild(el("path", { class: "edge", d: `M${x1},${y1} C${x1 + GX / 2},${y1} ${x2 - GX / 2},${y2} ${x2},${y2}` }));
    svg.appendChild(el("text", { class: "edge-label", x: (x1 + x2) / 2 - 26, y: (y1 + y2) / 2 - 6 }, e.side_output ? "side: " + e.side_output : e.ship));
  }
  graph.vertices.forEach((v, i) => {
    const p = at(i);
    const isBottleneck = bottleneck && bottleneck.vertex === i;
    const g = el("g", {
      class: "vertex " + v.backpressure + (isBottleneck ? " bottleneck" : ""),
      id: "vertex-" + i,
      "data-backpressure": v.backpressure,
      "data-bottleneck": isBottleneck ? "true" : "false",
      "data-name": v.name,
      transform: `translate(${p.x},${p.y})`,
    });
    g.appendChild(el("rect", { width: W, height: H }));
    const title = v.name.length > 44 ? v.name.slice(0, 42) + "…" : v.name;
    g.appendChild(el("title", {}, v.name));
    g.appendChild(el("text", { class: "title", x: 10, y: 20 }, title));
    g.appendChild(el("text", { x: 10, y: 40 }, `×${v.parallelism} · ${fmt(v.records_per_sec)} rec/s`));
    g.appendChild(el("text", { x: 10, y: 60 }, `busy ${fmt(v.busy_ms_per_sec)} · back-pressured ${fmt(v.backpressured_ms_per_sec)} ms/s · ${v.backpressure}`));
    svg.appendChild(g);
  });
}

function drawChart(id, points, series, names) {
  const svg = $(id);
  svg.replaceChildren();
  const W = 600, H = 150, L = 46, B = 18;
  svg.setAttribute("viewBox", `0 0 ${W} ${H}`);
  svg.setAttribute("preserveAspectRatio", "none");
  if (points.length < 2) return;
  const t0 = points[0].t, t1 = points[points.length - 1].t;
  let max = 0;
  for (const s of series) for (const p of points) max = Math.max(max, s(p) || 0);
  max = max || 1;
  const x = (t) => L + ((t - t0) / Math.max(1, t1 - t0)) * (W - L - 4);
  const y = (v) => H - B - (v / max) * (H - B - 8);
  for (const f of [0, 0.5, 1]) {
    svg.appendChild(el("line", { class: "grid", x1: L, x2: W, y1: y(max * f), y2: y(max * f) }));
    svg.appendChild(el("text", { class: "axis", x: 2, y: y(max * f) + 4 }, fmt(max * f)));
  }
  svg.appendChild(el("text", { class: "axis", x: L, y: H - 4 }, "-" + duration(t1 - t0)));
  svg.appendChild(el("text", { class: "axis", x: W - 30, y: H - 4 }, "now"));
  series.forEach((s, i) => {
    const pts = points.filter((p) => s(p) !== null && s(p) !== undefined).map((p) => `${x(p.t).toFixed(1)},${y(s(p)).toFixed(1)}`);
    const line = el("polyline", { class: "series-" + (i % 5), points: pts.join(" ") });
    if (names) line.appendChild(el("title", {}, names[i]));
    svg.appendChild(line);
  });
}

function cells(row, values) {
  for (const v of values) {
    const td = document.createElement("td");
    if (v instanceof Node) td.appendChild(v); else td.textContent = v;
    row.appendChild(td);
  }
}

function level(value) {
  const span = document.createElement("span");
  span.className = "lvl " + value;
  span.textContent = value;
  return span;
}

function drawOperators(operators) {
  const body = document.querySelector("#operators tbody");
  body.replaceChildren();
  for (const o of operators) {
    const row = document.createElement("tr");
    row.dataset.operator = o.name;
    const lag = Object.values(o.split_lag || {}).reduce((a, b) => a + b, 0);
    cells(row, [o.name, o.parallelism, fmt(o.records_in), fmt(o.records_out), fmt(o.records_in_per_sec), fmt(o.records_out_per_sec),
      fmt(o.busy_ms_per_sec), fmt(o.backpressured_ms_per_sec), level(o.backpressure), o.latency ? duration(Math.round(o.latency.p99_ms)) : "–", lagCell(o),
      fmt(o.late_records_dropped + o.late_records_side_output), fmt(o.bad_records), fmt(o.watermark_outliers), o.state_entries ? fmt(o.state_entries) + " / " + bytes(o.state_bytes) : "–",
      Object.keys(o.split_lag || {}).length ? fmt(lag) : "–"]);
    body.appendChild(row);
  }
}

function drawCheckpoints(checkpoints) {
  const body = document.querySelector("#checkpoints tbody");
  body.replaceChildren();
  for (const c of checkpoints.history.slice(-15).reverse()) {
    const row = document.createElement("tr");
    cells(row, [c.id, c.kind, c.status, new Date(c.triggered_at).toLocaleTimeString(), duration(c.duration_ms), duration(c.alignment_ms), bytes(c.size_bytes), bytes(c.state_size_bytes)]);
    if (c.status !== "completed") row.children[2].className = "failed";
    body.appendChild(row);
  }
  $("checkpoint-count").textContent = `${checkpoints.completed} ok / ${checkpoints.failed} failed`;
}

// The process group the job runs in (riffle demo --kafka B --group NAME): asked every 5 s (it
// asks the brokers); a job in one process answers 404 and the section stays hidden.
async function refreshGroup() {
  const response = await fetch("/api/v1/group");
  const section = $("group");
  if (!response.ok) {
    section.hidden = true;
    return;
  }
  const group = await response.json();
  section.hidden = false;
  const lag = Object.entries(group.lag).map(([topic, n]) => `${topic} ${fmt(n)}`).join(", ");
  // The coordinator's live members when the brokers describe the group, else those that committed.
  const assigned = group.assigned && Object.keys(group.assigned).length ? group.assigned : group.members;
  $("group-facts").textContent = `${group.group} · this member ${group.member} owns ${group.owned.length} partitions · ${Object.keys(assigned).length} members · lag ${lag}` +
    (group.standby && group.standby.length ? ` · standby for ${group.standby.length} partitions (${bytes(group.standby_bytes)})` : "");
  const members = document.querySelector("#group-members tbody");
  members.replaceChildren();
  for (const [member, partitions] of Object.entries(assigned)) {
    const row = document.createElement("tr");
    cells(row, [member, partitions.length ? partitions.join(" ") : "none"]);
    if (member === group.member) row.className = "owned";
    members.appendChild(row);
  }
  const body = document.querySelector("#group-partitions tbody");
  body.replaceChildren();
  for (const p of group.partitions) {
    const row = document.createElement("tr");
    cells(row, [`${p.topic}-${p.partition}`, p.committed === null ? "–" : fmt(p.committed), fmt(p.end), fmt(p.lag), p.committed_by || "–"]);
    if (group.owned.includes(`${p.topic}-${p.partition}`)) row.className = "owned";
    body.appendChild(row);
  }
}

async function refresh() {
  try {
    const [job, graph, operators, checkpoints, history] = await Promise.all([
      get("/api/v1/job"), get("/api/v1/job/graph"), get("/api/v1/job/operators"), get("/api/v1/job/checkpoints"), get("/api/v1/job/history"),
    ]);
    document.title = "Riffle · " + job.name;
    $("job-name").textContent = job.name;
    const status = $("job-status");
    status.textContent = job.stopping ? "STOPPING" : job.status;
    status.className = "status " + job.status;
    $("job-facts").textContent = `id ${job.id} · up ${duration(job.uptime_ms)} · parallelism ${job.parallelism} · restarts ${job.restarts}` +
      (job.checkpoint_interval_ms ? ` · checkpoint every ${duration(job.checkpoint_interval_ms)}` : " · no checkpoints") +
      ` · ${fmt(job.source_records_per_sec)} rec/s in, ${fmt(job.sink_records_per_sec)} rec/s out`;
    const ended = ["FINISHED", "FAILED", "CANCELLED"].includes(job.status);
    for (const b of ["btn-savepoint", "btn-stop", "btn-cancel"]) $(b).disabled = ended;
    const box = $("bottleneck");
    box.hidden = !job.bottleneck;
    if (job.bottleneck) {
      box.replaceChildren();
      const b = document.createElement("b");
      b.textContent = "Bottleneck: " + job.bottleneck.operator;
      box.append(b, " — " + job.bottleneck.hint);
      box.dataset.operator = job.bottleneck.operator;
    }
    drawGraph(graph, job.bottleneck);
    const points = history.points;
    drawChart("chart-throughput", points, [(p) => p.source_records_per_sec, (p) => p.sink_records_per_sec], ["sources", "sinks"]);
    drawChart("chart-backpressure", points, history.vertices.map((_, i) => (p) => p.backpressured_ms_per_sec[i]), history.vertices);
    drawChart("chart-latency", points, [(p) => p.latency_p50_ms, (p) => p.latency_p99_ms], ["p50", "p99"]);
    const synthetic = job.event_time === "synthetic";
    const lagOf = (p) => (synthetic ? p.watermark_lag_behind_newest_ms : p.watermark_lag_ms);
    drawChart("chart-watermark", points, [(p) => (lagOf(p) === null || lagOf(p) === undefined ? null : lagOf(p) / 1000)],
      [synthetic ? "watermark lag behind the newest record" : "watermark lag"]);
    $("chart-watermark-caption").textContent = synthetic
      ? "Watermark lag behind the newest record, s (synthetic event time)" : "Watermark lag behind the wall clock, s";
    $("late-records").textContent = fmt(job.late_records);
    $("bad-records").textContent = fmt(job.bad_records);
    const lag = watermarkLag(job);
    $("watermark-lag").textContent = lag.text;
    $("watermark-lag").title = lag.title;
    $("event-time").hidden = !lag.synthetic;
    $("latency").textContent = job.latency ? `${duration(Math.round(job.latency.p50_ms))} / ${duration(Math.round(job.latency.p99_ms))}` : "–";
    drawOperators(operators);
    drawCheckpoints(checkpoints);
    document.body.dataset.loaded = "true";
  } catch (e) {
    show("cannot reach the job: " + e.message, true);
  }
}

refresh();
setInterval(refresh, 1000);
refreshGroup().catch(() => {});
setInterval(() => refreshGroup().catch(() => {}), 5000);
