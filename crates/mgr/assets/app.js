// Shoal's dashboard: reads /api/summary every two seconds and draws it;
// admin actions post to /api/action, which runs them as the logged-in
// user (the monitors decide whether they may). No library, no CDN.
"use strict";

const $ = (id) => document.getElementById(id);
const REFRESH_MS = 2000;
let summary = null;
let timer = null;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return e;
}

function bytes(n) {
  if (n === null || n === undefined || isNaN(n)) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  let i = 0;
  n = Number(n);
  while (Math.abs(n) >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? n.toFixed(0) : n.toFixed(1)) + " " + units[i];
}

function rate(n) { return n > 0 && n < 10 ? n.toFixed(1) : Math.round(n || 0).toString(); }

function duration(secs) {
  if (secs < 60) return secs + " s";
  if (secs < 3600) return Math.round(secs / 60) + " min";
  return (secs / 3600).toFixed(1) + " h";
}

function notice(text, bad) {
  const n = $("notice");
  n.textContent = text;
  n.className = bad ? "notice bad" : "notice";
  n.hidden = !text;
}

async function api(method, path, body) {
  const r = await fetch(path, {
    method,
    headers: body ? { "Content-Type": "application/json" } : {},
    body: body ? JSON.stringify(body) : undefined,
    credentials: "same-origin",
  });
  let data = null;
  try { data = await r.json(); } catch (_) { data = null; }
  return { status: r.status, data };
}

function showLogin(message) {
  clearInterval(timer);
  timer = null;
  $("app").hidden = true;
  $("login").hidden = false;
  $("login-error").textContent = message || "";
}

async function refresh() {
  let r;
  try {
    r = await api("GET", "/api/summary");
  } catch (_) {
    notice("The manager does not answer.", true);
    return;
  }
  if (r.status === 401) return showLogin();
  if (r.status !== 200 || !r.data) {
    notice((r.data && r.data.error) || "The manager answered " + r.status, true);
    return;
  }
  if ($("notice").classList.contains("bad") && !$("notice").dataset.sticky) notice("");
  summary = r.data;
  $("login").hidden = true;
  $("app").hidden = false;
  document.body.classList.toggle("admin", !!summary.user.admin);
  $("user").textContent = summary.user.entity;
  $("role").textContent = summary.user.admin ? "(admin)" : "(read-only)";
  $("not-ready").hidden = summary.ready;
  if (!summary.ready) return;
  draw(summary);
}

function draw(s) {
  const st = s.status;
  const health = st.health || {};
  const badge = $("health-status");
  badge.textContent = health.status || "?";
  badge.className = "badge " + (health.status || "");
  drawChecks(health);
  drawCluster(s);
  drawRecovery(s.recovery);
  drawCharts(s.history || []);
  drawOsds(s.osds || []);
  drawPools(s.pools || []);
  drawPgs(st.pgmap || {}, s.recovery);
  drawCatalog(s.catalog);
  $("updated").textContent = new Date(s.at_ms).toLocaleTimeString();
  $("served-by").textContent = "mgr." + s.mgr.name;
}

function drawChecks(health) {
  const ul = $("health-checks");
  ul.replaceChildren();
  const checks = health.checks || [];
  if (checks.length === 0) ul.append(el("li", {}, "No health check raised."));
  for (const c of checks) {
    const detail = el("ul", {});
    for (const d of c.detail || []) detail.append(el("li", {}, d));
    ul.append(el("li", { class: c.severity, "data-code": c.code },
      el("span", { class: "code" }, c.code), " ", c.summary, detail));
  }
  const muted = (health.muted || []).map((c) => c.code);
  $("health-muted").textContent = muted.length ? "Muted: " + muted.join(", ") : "";
}

function drawCluster(s) {
  const st = s.status;
  const mons = (st.monmap && st.monmap.mons) || [];
  const inq = mons.filter((m) => m.in_quorum).map((m) => m.name);
  $("mon-summary").textContent = mons.length + " (quorum " + inq.join(", ") + "; leader " + (st.leader || "none") + ")";
  const mm = (st.mgrmap || {});
  $("mgr-summary").textContent = mm.active ? mm.active.name + " active, " + (mm.standbys || []).length + " standby" : "none active";
  const om = st.osdmap || {};
  $("osd-up").textContent = om.num_up_osds;
  $("osd-in").textContent = om.num_in_osds;
  $("osd-total").textContent = om.num_osds;
  $("pool-count").textContent = om.num_pools;
  const pg = st.pgmap || {};
  $("pg-total").textContent = pg.num_pgs;
  $("objects").textContent = pg.num_objects + " (" + bytes(pg.num_bytes) + ")";
  $("raw-space").textContent = bytes(pg.raw_bytes_used) + " used of " + bytes(pg.raw_bytes);
}

function drawRecovery(r) {
  const bad = (r.degraded || 0) + (r.misplaced || 0);
  const copies = r.copies || 0;
  const done = copies > 0 ? Math.max(0, 1 - bad / copies) : 1;
  $("recovery-bar").style.width = (done * 100).toFixed(1) + "%";
  let text = bad === 0 ? "All object copies in place." :
    r.degraded + " copies degraded, " + r.misplaced + " misplaced; " + r.objects_left + " objects to recover";
  if (bad > 0) text += r.eta_secs ? " at " + r.objects_per_s + "/s, about " + duration(r.eta_secs) + " left." : ".";
  $("recovery-text").textContent = text;
}

function chart(svg, points, key, fmt) {
  const W = 800, H = 160, PAD = 18;
  svg.replaceChildren();
  const ns = "http://www.w3.org/2000/svg";
  const now = Date.now();
  const t0 = now - 3600 * 1000;
  let max = 1;
  for (const p of points) max = Math.max(max, p["read_" + key], p["write_" + key]);
  const x = (t) => ((t - t0) / (now - t0)) * W;
  const y = (v) => H - PAD - (v / max) * (H - 2 * PAD);
  for (const kind of ["read", "write"]) {
    const d = points.map((p, i) => (i ? "L" : "M") + x(p.at_ms).toFixed(1) + "," + y(p[kind + "_" + key]).toFixed(1)).join(" ");
    const path = document.createElementNS(ns, "path");
    path.setAttribute("class", kind);
    path.setAttribute("d", d || "M0," + y(0));
    svg.append(path);
  }
  const text = (x, y, anchor, s) => {
    const t = document.createElementNS(ns, "text");
    t.setAttribute("x", x);
    t.setAttribute("y", y);
    t.setAttribute("text-anchor", anchor);
    t.textContent = s;
    svg.append(t);
  };
  text(4, 12, "start", "max " + fmt(max));
  text(4, H - 4, "start", "60 min ago");
  text(W - 4, H - 4, "end", "now");
}

function drawCharts(points) {
  chart($("chart-bytes"), points, "bytes", (v) => bytes(v) + "/s");
  chart($("chart-ops"), points, "ops", (v) => rate(v) + " op/s");
  const last = points[points.length - 1];
  $("io-now").textContent = last ?
    "now: " + bytes(last.read_bytes) + "/s read, " + bytes(last.write_bytes) + "/s written, " +
    rate(last.read_ops) + " rd op/s, " + rate(last.write_ops) + " wr op/s" : "";
}

function drawOsds(nodes) {
  const tb = $("osd-table").tBodies[0];
  tb.replaceChildren();
  for (const n of nodes) {
    const indent = "\u00a0\u00a0".repeat(n.depth || 0);
    const row = el("tr", { "data-name": n.name });
    row.append(el("td", {}, indent + n.name), el("td", {}, n.type));
    if (n.type === "osd") {
      const status = (n.up ? "up" : "down") + ", " + (n.in ? "in" : "out");
      row.append(el("td", { class: n.up ? (n.in ? "up" : "out") : "down" }, status));
      row.append(el("td", { class: "num" }, Number(n.crush_weight).toFixed(3)));
      row.append(el("td", { class: "num" }, Number(n.reweight).toFixed(3)));
      const used = n.used_bytes || 0, total = n.total_bytes || 0;
      const pct = total ? (100 * used) / total : 0;
      const bar = el("div", { class: "bar", title: bytes(used) + " of " + bytes(total) }, el("div", {}));
      bar.firstChild.style.width = pct.toFixed(1) + "%";
      row.append(el("td", { class: "usage" }, bar, el("span", { class: "muted" },
        total ? pct.toFixed(1) + "% of " + bytes(total) : "not reported")));
      const act = n.in ? "osd-out" : "osd-in";
      row.append(el("td", { class: "admin-only" },
        el("button", { class: "small", "data-action": act, "data-osd": n.id,
          onclick: () => act_(act, { osd: n.id }, n.name + " marked " + (n.in ? "out" : "in")) },
        n.in ? "Mark out" : "Mark in"), " ",
        el("button", { class: "small", "data-action": "osd-scrub", "data-osd": n.id,
          onclick: () => act_("osd-scrub", { osd: n.id }, n.name + ": scrub started") },
        "Scrub")));
    } else {
      row.append(el("td", {}), el("td", { class: "num" }, Number(n.crush_weight).toFixed(3)), el("td", {}), el("td", {}), el("td", { class: "admin-only" }));
    }
    tb.append(row);
  }
}

function drawPools(pools) {
  const tb = $("pool-table").tBodies[0];
  tb.replaceChildren();
  const sel = $("pool-set-pool");
  const chosen = sel.value;
  sel.replaceChildren();
  for (const p of pools) {
    const s = p.stats || {}, io = p.io || {};
    tb.append(el("tr", { "data-pool": p.name },
      el("td", {}, p.name), el("td", { class: "num" }, p.id), el("td", { class: "num" }, p.pg_num),
      el("td", { class: "num" }, bytes(s.stored)), el("td", { class: "num" }, s.objects),
      el("td", { class: "num" }, (100 * (s.percent_used || 0)).toFixed(2) + "%"),
      el("td", { class: "num" }, bytes(s.max_avail)),
      el("td", { class: p.quota && p.quota.full ? "down" : "" }, quota(p.quota)),
      el("td", { class: "num" }, rate(io.read_ops) + " op/s, " + bytes(io.read_bytes) + "/s"),
      el("td", { class: "num" }, rate(io.write_ops) + " op/s, " + bytes(io.write_bytes) + "/s")));
    sel.append(el("option", { value: p.name }, p.name));
  }
  if (chosen) sel.value = chosen;
}

function quota(q) {
  if (!q || (!q.max_bytes && !q.max_objects)) return "none";
  const parts = [];
  if (q.max_objects) parts.push(q.max_objects + " objects");
  if (q.max_bytes) parts.push(bytes(q.max_bytes));
  return parts.join(", ") + (q.full ? " (full)" : "");
}

function drawPgs(pg, r) {
  const tb = $("pg-states").tBodies[0];
  tb.replaceChildren();
  for (const s of pg.num_pg_by_state || []) {
    tb.append(el("tr", { "data-state": s.name }, el("td", {}, s.name), el("td", { class: "num" }, s.num)));
  }
  $("pg-copies").textContent = r.copies;
  $("pg-degraded").textContent = r.degraded;
  $("pg-misplaced").textContent = r.misplaced;
  $("pg-recovering").textContent = r.objects_left + " objects" + (r.eta_secs ? ", ETA " + duration(r.eta_secs) : "");
}

function drawCatalog(c) {
  const note = $("catalog-note");
  const images = $("image-table").tBodies[0];
  const buckets = $("bucket-table").tBodies[0];
  images.replaceChildren();
  buckets.replaceChildren();
  if (!c) { note.textContent = "Not listed yet."; return; }
  note.textContent = c.error ? "Listing failed: " + c.error :
    (c.truncated ? "The first of many; the listing stops there." : "");
  const when = (ms) => ms ? new Date(ms).toLocaleString() : "";
  for (const i of c.images || []) {
    images.append(el("tr", { "data-image": i.pool + "/" + i.name },
      el("td", {}, i.pool), el("td", {}, i.name), el("td", { class: "num" }, bytes(i.size)),
      el("td", { class: "num" }, i.objects), el("td", { class: "num" }, i.snapshots),
      el("td", {}, i.parent || ""), el("td", {}, i.data_pool || ""), el("td", {}, when(i.created_ms))));
  }
  if (!(c.images || []).length) images.append(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "No images.")));
  for (const b of c.buckets || []) {
    buckets.append(el("tr", { "data-bucket": b.name },
      el("td", {}, b.name), el("td", {}, b.owner), el("td", {}, b.acl), el("td", {}, b.versioning || "off"),
      el("td", { class: "num" }, b.shards), el("td", {}, when(b.created_ms))));
  }
  if (!(c.buckets || []).length) buckets.append(el("tr", {}, el("td", { colspan: 6, class: "muted" }, "No buckets.")));
}

async function act_(action, args, done) {
  const r = await api("POST", "/api/action", Object.assign({ action }, args));
  if (r.status === 200) notice(done);
  else if (r.status === 202) {
    const o = (r.data && r.data.output) || {};
    notice(done + " (" + o.pgs + " PGs; the first: " + ((o.first && o.first.objects) || 0) + " objects, " +
      ((o.first && o.first.errors) || 0) + " errors)");
  }
  else notice("Refused: " + ((r.data && r.data.error) || r.status), true);
  await refresh();
}

function showPage() {
  const page = (location.hash || "#overview").slice(1);
  for (const p of document.querySelectorAll(".page")) p.hidden = p.id !== "page-" + page;
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("current", a.dataset.page === page);
}

$("login-form").addEventListener("submit", async (ev) => {
  ev.preventDefault();
  const r = await api("POST", "/api/login", { entity: $("login-entity").value, key: $("login-key").value });
  if (r.status !== 200) return showLogin((r.data && r.data.error) || "Login failed");
  $("login-key").value = "";
  start();
});

$("logout").addEventListener("click", async () => {
  await api("POST", "/api/logout");
  showLogin();
});

$("pool-create").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  act_("pool-create", { pool: f.get("pool"), pg_num: Number(f.get("pg_num")), size: Number(f.get("size")) },
    "Pool " + f.get("pool") + " created");
});

$("pool-set").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = new FormData(ev.target);
  act_("pool-set", { pool: f.get("pool"), key: f.get("key"), value: f.get("value") },
    "Pool " + f.get("pool") + ": " + f.get("key") + " set");
});

window.addEventListener("hashchange", showPage);

function start() {
  showPage();
  refresh();
  clearInterval(timer);
  timer = setInterval(refresh, REFRESH_MS);
}

// Logged in already (the session cookie lives)? Then straight in.
api("GET", "/api/whoami").then((r) => {
  if (r.status === 200 && r.data && r.data.user) start();
  else showLogin();
}, () => showLogin("The manager does not answer."));
