// berth's dashboard: plain JavaScript, no framework, no network but the berth server.
// Every view is built with DOM calls (never innerHTML), so a job's name or log cannot inject markup.
'use strict';

const state = { me: null, csrf: null, timer: null, etags: new Map(), cache: new Map(), view: null };
const POLL_MS = 2000;

// ---- helpers --------------------------------------------------------------------------------

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'dataset') Object.assign(el.dataset, v);
    else if (k === 'style') el.style.cssText = v;  // CSSOM: allowed by the page's CSP, unlike style=
    else el.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

class HttpError extends Error {
  constructor(status, message) { super(message); this.status = status; }
}

// GET with ETags: an unchanged answer (304) costs a few bytes and returns the cached value.
async function getJson(path) {
  const headers = {};
  if (state.etags.has(path)) headers['If-None-Match'] = state.etags.get(path);
  const r = await fetch(path, { headers, cache: 'no-store', credentials: 'same-origin' });
  if (r.status === 304) return state.cache.get(path);
  const body = await r.json().catch(() => ({}));
  if (!r.ok) throw new HttpError(r.status, body.error || r.statusText);
  const tag = r.headers.get('ETag');
  if (tag) {
    state.etags.set(path, tag);
    state.cache.set(path, body);
  }
  return body;
}

async function postJson(path, body) {
  const r = await fetch(path, {
    method: 'POST', cache: 'no-store', credentials: 'same-origin',
    headers: { 'Content-Type': 'application/json', 'X-Berth-CSRF': state.csrf || '' },
    body: JSON.stringify(body || {}),
  });
  const out = await r.json().catch(() => ({}));
  if (!r.ok) throw new HttpError(r.status, out.error || r.statusText);
  return out;
}

function gpuText(n) { return Number.isInteger(n) ? String(n) : n.toFixed(2).replace(/0+$/, ''); }
function pct(used, total) { return total > 0 ? Math.min(100, (100 * used) / total) : 0; }
function bar(used, total, cls) {
  return h('div', { class: 'bar ' + (cls || ''), title: `${gpuText(used)} of ${gpuText(total)}` },
    h('span', { style: `width:${pct(used, total).toFixed(1)}%` }));
}
function statusEl(s) { return h('span', { class: 'status ' + s }, s); }
function ago(iso) {
  if (!iso) return '';
  const s = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (s < 60) return `${Math.round(s)}s ago`;
  if (s < 3600) return `${Math.round(s / 60)}m ago`;
  if (s < 86400) return `${(s / 3600).toFixed(1)}h ago`;
  return `${(s / 86400).toFixed(1)}d ago`;
}
function resText(r) {
  const parts = [];
  if (r.accelerators) for (const [t, n] of Object.entries(r.accelerators)) parts.push(`${t}:${gpuText(n)}`);
  parts.push(`${r.cpus} CPU`);
  parts.push(`${gpuText(r.memory)} GiB`);
  return parts.join(' ');
}
// A colour per job, stable across views, far apart for neighbouring ids.
function jobColour(id) { return `hsl(${(id * 137.508) % 360} 62% 55%)`; }

function setView(...nodes) {
  const view = document.getElementById('view');
  view.replaceChildren(...nodes);
}
function showError(e) {
  if (e instanceof HttpError && e.status === 401) return showLogin(e.message);
  setView(h('p', { class: 'error' }, String(e.message || e)));
}

const tip = () => document.getElementById('tip');
function showTip(ev, text) {
  const t = tip();
  t.textContent = text;
  t.hidden = false;
  t.style.left = `${ev.clientX + 12}px`;
  t.style.top = `${ev.clientY + 12}px`;
}
function hideTip() { tip().hidden = true; }

// ---- login ----------------------------------------------------------------------------------

function showLogin(message) {
  stopPolling();
  state.etags.clear();
  state.cache.clear();
  delete document.body.dataset.rendered;
  document.getElementById('who').textContent = '';
  document.getElementById('logout').hidden = true;
  const input = h('input', { type: 'password', name: 'token', placeholder: 'berth_…', autocomplete: 'off', 'aria-label': 'token' });
  const err = h('p', { class: 'error' }, message && !/session|not know who/.test(message) ? message : '');
  const form = h('form', {
    onsubmit: async (ev) => {
      ev.preventDefault();
      try {
        await postJson('/v1/dashboard/login', { token: input.value.trim() });
        await start();
      } catch (e) { err.textContent = e.message; }
    },
  }, input, h('button', { type: 'submit' }, 'Log in'));
  setView(h('section', { class: 'login panel' },
    h('h1', {}, 'Log in to berth'),
    h('p', {}, 'Run ', h('code', {}, 'berth dashboard'), ' and open the link it prints, or paste an API token (', h('code', {}, 'berth admin token create'), ').'),
    form, err));
}

// ---- overview -------------------------------------------------------------------------------

async function renderOverview() {
  const [ov, teams, resv] = await Promise.all([getJson('/v1/dashboard/overview'), getJson('/v1/teams'),
    // A failure here (not a lost session) is said in its panel; the rest of the overview still draws.
    getJson('/v1/reservations').catch((e) => { if (e instanceof HttpError && e.status === 401) throw e; return { error: e.message }; })]);
  const jobs = ov.jobs || {};
  const n = (k) => jobs[k] || 0;
  const card = (label, big, extra) => h('div', { class: 'card panel' }, h('div', { class: 'label' }, label), h('div', { class: 'big' }, big), extra || '');
  const cards = h('div', { class: 'cards' },
    card('Nodes', (ov.nodes.UP || 0) + (ov.nodes.DRAINING || 0) + (ov.nodes.DOWN || 0),
      h('div', { class: 'small muted' }, `${ov.nodes.UP || 0} up · ${ov.nodes.DRAINING || 0} draining · ${ov.nodes.DOWN || 0} down`)),
    card('Running', n('RUNNING') + n('STARTING') + n('SETTING_UP'), h('div', { class: 'small muted' }, `${n('STARTING') + n('SETTING_UP')} starting`)),
    card('Pending', n('PENDING'), h('div', { class: 'small muted' }, `${n('STOPPING')} stopping`)),
    card('CPUs in use', `${gpuText(ov.cpus.used)} / ${gpuText(ov.cpus.total)}`, bar(ov.cpus.used, ov.cpus.total, 'cpu')),
    card('Memory in use', `${Math.round(ov.memory.used)} / ${Math.round(ov.memory.total)} GiB`, bar(ov.memory.used, ov.memory.total, 'mem')),
  );
  const gpuRows = ov.gpus.map((g) => h('tr', { dataset: { gpuType: g.type } },
    h('td', {}, g.type), h('td', {}, `${gpuText(g.used)} / ${gpuText(g.total)}`),
    h('td', { style: 'width:40%' }, bar(g.used, g.total)), h('td', {}, g.down ? `${gpuText(g.down)} down` : '')));
  const teamRows = (teams.teams || []).map((t) => {
    const types = new Set([...Object.keys(t.quota || {}), ...Object.keys(t.uses || {})]);
    const cells = [...types].map((ty) => `${ty}: ${gpuText((t.uses || {})[ty] || 0)}` + (t.quota && t.quota[ty] !== undefined ? ` of ${gpuText(t.quota[ty])}` : ''));
    return h('tr', {}, h('td', {}, t.name || '(no team)'), h('td', {}, cells.join(', ') || '—'),
      h('td', {}, ...[...types].filter((ty) => t.quota && t.quota[ty]).map((ty) => bar((t.uses || {})[ty] || 0, t.quota[ty]))),
      h('td', {}, String(t.weight)), h('td', {}, `${(t.usage / 3600).toFixed(1)} GPU-h`),
      h('td', { class: 'muted' }, (t.users || []).join(', ')));
  });
  const idle = (ov.idle_gpus || []).map((g) => h('tr', { dataset: { job: g.job } },
    h('td', {}, h('a', { href: `#/job/${g.job}` }, String(g.job))), h('td', {}, g.user), h('td', {}, gpuText(g.gpus)),
    h('td', {}, `idle for ${Math.round(g.idle_for_seconds / 60)}m`), h('td', { class: 'muted' }, `mean ${Number(g.mean_sm).toFixed(1)}% SM`)));
  const failures = (ov.recent_failures || []).map((j) => h('tr', {},
    h('td', {}, h('a', { href: `#/job/${j.id}` }, String(j.id))), h('td', {}, j.name), h('td', {}, j.user),
    h('td', {}, j.exit_code === null ? '' : `exit ${j.exit_code}`), h('td', { class: 'reason' }, j.reason), h('td', { class: 'muted' }, ago(j.ended_at))));
  setView(
    h('h1', {}, 'Cluster'), cards,
    h('h2', {}, 'GPUs in use by type'),
    ov.gpus.length ? h('table', { id: 'gpu-types' }, h('tr', {}, h('th', {}, 'type'), h('th', {}, 'used / total'), h('th', {}, ''), h('th', {}, '')), gpuRows)
      : h('p', { class: 'muted' }, 'No GPUs in this cluster.'),
    h('h2', {}, 'Teams: GPUs held against quota'),
    teamRows.length ? h('table', {}, h('tr', {}, h('th', {}, 'team'), h('th', {}, 'holds'), h('th', {}, 'against quota'), h('th', {}, 'weight'), h('th', { title: 'decayed, weighted GPU-hours (docs/fair-share.md)' }, 'fair-share usage'), h('th', {}, 'users')), teamRows)
      : h('p', { class: 'muted' }, 'No teams.'),
    h('h2', {}, 'Idle GPUs now'),
    idle.length ? h('table', { id: 'idle-gpus' }, h('tr', {}, h('th', {}, 'job'), h('th', {}, 'user'), h('th', {}, 'GPUs'), h('th', {}, ''), h('th', {}, '')), idle)
      : h('p', { class: 'muted' }, 'None (or no node samples its GPUs).'),
    h('h2', {}, 'Recent failures'),
    failures.length ? h('table', {}, failures) : h('p', { class: 'muted' }, 'None.'),
    reservationsPanel(resv));
}

// ---- reservations ---------------------------------------------------------------------------

const DAY_MS = 86400000;
const RESV_SPAN_MS = 7 * DAY_MS;
const RESV_PERIOD_MS = { daily: DAY_MS, weekly: 7 * DAY_MS };
const WEEKDAYS = ['Sun', 'Mon', 'Tue', 'Wed', 'Thu', 'Fri', 'Sat'];

// Who a reservation is for, as `berth reserve list` says it.
function resvWho(r) {
  if (r.maintenance) return 'maintenance';
  if (r.team) return `team ${r.team}`;
  return (r.users || []).length ? `users ${r.users.join(', ')}` : 'anyone naming it';
}

// Its windows that start before `to`: the one the server gives (the current or next), then, for a
// daily or weekly repeat, one per period after it. The server alone reads a cron repeat: its one window.
function resvWindows(r, to) {
  if (!r.window) return [];
  const first = Date.parse(r.window.start);
  const out = [{ start: first, end: Date.parse(r.window.end), active: !!r.active }];
  const period = RESV_PERIOD_MS[r.repeat];
  if (period) {
    for (let k = 1, s = first + period; s < to && k < 1000; k++, s += period) {
      out.push({ start: s, end: s + r.duration_s * 1000, active: false });
    }
  }
  return out.filter((w) => w.start < to);
}

function utcText(t) { return new Date(t).toISOString().slice(0, 16).replace('T', ' '); }

// The next 7 days from the server's now as a time axis, a row per reservation with its windows as bars
// (docs/dashboard.md "Reservations").
function reservationsPanel(data) {
  const ical = h('a', { id: 'resv-ical', href: '/v1/reservations.ics', title: 'the next 30 days as an iCalendar feed' }, 'Subscribe (iCal)');
  const head = h('h2', {}, 'Reservations ', h('span', { class: 'small' }, ical));
  if (data.error) return h('section', { id: 'reservations' }, head, h('p', { class: 'error' }, data.error));
  const list = data.reservations || [];
  const from = data.now ? Date.parse(data.now) : Date.now();
  const to = from + RESV_SPAN_MS;
  const x = (t) => (100 * (Math.min(Math.max(t, from), to) - from)) / RESV_SPAN_MS;
  // A tick at each UTC midnight inside the span.
  const ticks = [];
  for (let t = Math.ceil(from / DAY_MS) * DAY_MS; t < to; t += DAY_MS) ticks.push(t);
  const grid = () => ticks.map((t) => h('span', { class: 'resv-grid', style: `left:${x(t).toFixed(3)}%` }));
  const axis = h('div', { class: 'resv-axis' }, h('div', { class: 'resv-label muted small' }, 'UTC'),
    h('div', { class: 'resv-track' }, ...ticks.map((t) => {
      const d = new Date(t);
      return h('span', { class: 'resv-tick', style: `left:${x(t).toFixed(3)}%`, dataset: { t: new Date(t).toISOString() } },
        `${WEEKDAYS[d.getUTCDay()]} ${d.toISOString().slice(5, 10)}`);
    })));
  const rows = list.map((r) => {
    const where = r.all_nodes ? 'all nodes' : (r.gpus ? `${r.gpus} on ` : '') + (r.nodes || []).join(', ');
    const windows = resvWindows(r, to).filter((w) => w.end > from);
    const bars = windows.map((w) => {
      const cls = ['resv-bar'];
      if (r.maintenance) cls.push('maintenance');
      if (w.active) cls.push('active');
      const text = `${r.name} (${resvWho(r)}): ${utcText(w.start)} – ${utcText(w.end)} UTC on ${where}` + (w.active ? ' · now' : '');
      return h('span', {
        class: cls.join(' '), 'aria-label': text,
        dataset: { start: new Date(w.start).toISOString(), end: new Date(w.end).toISOString() },
        style: `left:${x(w.start).toFixed(3)}%;width:${(x(w.end) - x(w.start)).toFixed(3)}%`,
        onmousemove: (ev) => showTip(ev, text), onmouseleave: hideTip,
      });
    });
    const repeat = !r.repeat ? '' : RESV_PERIOD_MS[r.repeat] ? ` (${r.repeat})` : ` (repeats: ${r.repeat})`;
    const none = windows.length ? '' : h('span', { class: 'resv-none muted small' },
      r.window ? `next window ${utcText(Date.parse(r.window.start))} UTC` : 'no window left');
    return h('div', { class: 'resv-row' + (r.maintenance ? ' maintenance' : ''), dataset: { name: r.name } },
      h('div', { class: 'resv-label', title: `${r.name}: for ${resvWho(r)} on ${where}; by ${r.created_by}` },
        h('b', {}, r.name), ' ', h('span', { class: 'muted small' }, resvWho(r) + repeat)),
      h('div', { class: 'resv-track' }, ...grid(), ...bars, none));
  });
  return h('section', { id: 'reservations', dataset: { from: new Date(from).toISOString(), to: new Date(to).toISOString() } },
    head,
    rows.length ? h('div', { class: 'resv-timeline panel' }, axis, rows) : h('p', { class: 'muted' }, 'No reservations.'));
}

// ---- nodes ----------------------------------------------------------------------------------

const nodesUi = { filter: '', shown: 120, count: 0, drawnAt: 0 };

function gpuCell(d, nodeDown) {
  const holders = d.jobs || [];
  const used = 1 - d.free;
  const cls = ['gpu'];
  if (nodeDown) cls.push('down');
  if (d.fault) cls.push('faulty');  // fenced by the node's health probes: given to no job
  if (holders.length) cls.push('held');
  // Shaded by what the GPU does as its node last sampled it (docs/idle.md): a darker strip as tall
  // as its SM utilisation, and a held GPU below 5 % drawn pale (idle).
  const sampled = typeof d.sm === 'number';
  if (sampled && holders.length && d.sm < 5) cls.push('idle');
  const parts = [];
  if (holders.length === 1 && used >= 0.999) {
    parts.push(h('i', { style: `background:${jobColour(holders[0].id)}` }));
  } else if (holders.length) {
    // A shared device: a slice per holder (each its share when known, else an equal split), the
    // rest free.
    for (const j of holders) parts.push(h('i', { style: `background:${jobColour(j.id)}` }));
    if (d.free > 0.001) parts.push(h('i', {}));
  }
  const text = `${d.type} #${d.index}` + (holders.length
    ? ': ' + holders.map((j) => `job ${j.id} (${j.user})`).join(', ') + (d.free > 0.001 ? `, ${gpuText(d.free)} free` : '')
    : nodeDown ? ': node down' : d.fault ? '' : ': free') + (d.fault ? ` · unhealthy: ${d.fault}` : '') +
    (sampled ? ` · ${d.sm}% SM${holders.length && d.sm < 5 ? ' (idle)' : ''}` : '');
  const el = h('div', {
    class: cls.join(' '), 'aria-label': text,
    dataset: { index: d.index, jobs: holders.map((j) => j.id).join(','), free: d.free, sm: sampled ? d.sm : '' },
    onmousemove: (ev) => showTip(ev, text), onmouseleave: hideTip,
    onclick: () => { if (holders.length) location.hash = `#/job/${holders[0].id}`; },
  }, ...parts, sampled ? h('b', { class: 'sm', style: `height:${Math.max(0, Math.min(100, d.sm))}%` }) : '');
  return el;
}

// A node's devices in index order: whole GPUs as cells, and each GPU in MIG mode as a frame with
// its slices drawn inside it, each as wide as its share of the GPU (docs/gpus.md); a GPU being
// re-sliced says so.
function gpuMap(n, down) {
  const out = [];
  const frames = new Map();
  const changing = (n.mig && n.mig.changing) || {};
  for (const d of n.devices) {
    if (d.gpu === undefined) { out.push(gpuCell(d, down)); continue; }
    let frame = frames.get(d.gpu);
    if (!frame) {
      const to = changing[String(d.gpu)];
      frame = h('div', {
        class: 'mig' + (to ? ' changing' : ''), dataset: { gpu: d.gpu },
        title: `GPU ${d.gpu} in MIG mode` + (to ? `, being re-sliced to ${to.join(',')}` : ''),
      });
      frames.set(d.gpu, frame);
      out.push(frame);
    }
    const sevenths = Number((/-(?:\d+c\.)?(\d)g\./.exec(d.type) || [])[1] || 1);
    const cell = gpuCell(d, down);
    cell.classList.add('slice');
    cell.style.width = `${8 + sevenths * 6}px`;
    frame.append(cell);
  }
  return out;
}

// What an attempt used against its request: "peak 412 MiB (40%) · CPU 12.3 s (41%)".
function usedText(a) {
  const pct = (x) => (typeof x === 'number' ? ` (${Math.round(x * 100)}%)` : '');
  const parts = [];
  if (typeof a.peak_memory_bytes === 'number') {
    const mib = a.peak_memory_bytes / 1048576;
    parts.push(`peak ${mib >= 1024 ? (mib / 1024).toFixed(1) + ' GiB' : Math.round(mib) + ' MiB'}${pct(a.memory_efficiency)}`);
  }
  if (typeof a.cpu_seconds === 'number') parts.push(`CPU ${a.cpu_seconds.toFixed(1)} s${pct(a.cpu_efficiency)}`);
  return parts.join(' · ');
}

// The node cards under one heading per domain of the coarsest topology level ("rack r1 (16)"), those
// outside every domain of it last.
function domainSections(level, nodes, cards, domainOf) {
  const groups = new Map();
  nodes.forEach((n, k) => {
    const d = domainOf(n);
    if (!groups.has(d)) groups.set(d, []);
    groups.get(d).push(cards[k]);
  });
  return [...groups.entries()].map(([d, members]) => h('section', { class: 'domain', dataset: { domain: d } },
    h('h2', {}, d ? `${level} ${d} (${members.length})` : `no ${level} label (${members.length}): outside every ${level}`),
    h('div', { class: 'nodes' }, members)));
}

async function renderNodes() {
  const data = await getJson('/v1/nodes?holders=1');
  const all = data.nodes || [];
  nodesUi.count = all.length;
  nodesUi.drawnAt = Date.now();
  const f = nodesUi.filter.toLowerCase();
  const nodes = f ? all.filter((n) => n.name.toLowerCase().includes(f) || n.pool.toLowerCase().includes(f) ||
    Object.entries(n.labels).some(([k, v]) => `${k}=${v}`.toLowerCase().includes(f))) : all;
  // With topology levels (docs/topology.md), nodes are grouped by their domain at the coarsest.
  const level = all.length && all[0].topology ? Object.keys(all[0].topology)[0] : null;
  const domainOf = (n) => (level && n.topology[level]) || '';
  if (level) nodes.sort((a, b) => (domainOf(a) === domainOf(b) ? 0 : domainOf(a) === '' ? 1 : domainOf(b) === '' ? -1 : domainOf(a) < domainOf(b) ? -1 : 1));
  const shown = nodes.slice(0, nodesUi.shown);
  const cards = shown.map((n) => {
    const down = n.state === 'DOWN';
    const labels = Object.entries(n.labels).map(([k, v]) => `${k}=${v}`).join(' ');
    const types = [...new Set(n.devices.map((d) => d.type))].join(', ');
    return h('div', { class: `node ${n.state}`, dataset: { node: n.name } },
      h('div', { class: 'head' }, h('span', { class: 'name', title: n.name }, n.name), h('span', { class: `state ${n.state}` }, n.state)),
      h('div', { class: 'labels' }, (n.pool ? `pool ${n.pool} ` : '') + labels),
      h('div', { class: 'small muted isolation', title: 'how the node contains its jobs (docs/security.md "Isolation")' },
        (types ? `${types} · ` : '') + `isolation ${n.isolation}`),
      n.health && n.health.reason
        ? h('div', { class: 'small health-reason', title: 'drained by its health probes (docs/operators.md "Node health")' }, n.health.reason)
        : n.drained_by_operator ? h('div', { class: 'small muted' }, 'drained by an operator') : '',
      h('div', { class: 'gpus' }, ...gpuMap(n, down)),
      h('div', { class: 'small muted' }, `CPU ${gpuText(n.capacity.cpus - n.free.cpus)} / ${n.capacity.cpus}`), bar(n.capacity.cpus - n.free.cpus, n.capacity.cpus, 'cpu'),
      h('div', { class: 'small muted' }, `Memory ${gpuText(n.capacity.memory - n.free.memory)} / ${gpuText(n.capacity.memory)} GiB`), bar(n.capacity.memory - n.free.memory, n.capacity.memory, 'mem'));
  });
  const search = h('input', {
    type: 'search', placeholder: 'filter by name, pool or label', value: nodesUi.filter, id: 'node-filter',
    oninput: (ev) => { nodesUi.filter = ev.target.value; nodesUi.shown = 120; refresh(); },
  });
  setView(
    h('h1', {}, `Nodes (${all.length})`),
    h('div', { class: 'filters' }, search,
      h('span', { class: 'legend' },
        h('span', {}, h('span', { class: 'gpu' }), ' free'),
        h('span', {}, h('span', { class: 'gpu', style: `background:${jobColour(7)}` }), ' held (a colour per job)'),
        h('span', {}, h('span', { class: 'gpu' }, h('i', { style: `background:${jobColour(3)}` }), h('i', {})), ' shared / fractional'),
        h('span', {}, h('span', { class: 'gpu down' }), ' node down'),
        h('span', {}, h('span', { class: 'gpu faulty' }), ' unhealthy (fenced)'),
        h('span', {}, h('span', { class: 'gpu held', style: `background:${jobColour(7)}` }, h('b', { class: 'sm', style: 'height:60%' })), ' SM utilisation (dark strip)'),
        h('span', {}, h('span', { class: 'gpu held idle', style: `background:${jobColour(7)}` }), ' idle (below 5 % SM)'),
        h('span', {}, h('span', { class: 'mig legend-mig' }, h('span', { class: 'gpu slice' }), h('span', { class: 'gpu slice' })), ' MIG slices of one GPU'))),
    ...(level ? domainSections(level, shown, cards, domainOf) : [h('div', { class: 'nodes' }, cards)]),
    nodes.length > nodesUi.shown ? h('p', {}, h('button', { onclick: () => { nodesUi.shown += 240; refresh(); } }, `Show more (${nodes.length - nodesUi.shown} not shown)`)) : '');
  const active = document.getElementById('node-filter');
  if (f && active) { active.focus(); active.setSelectionRange(active.value.length, active.value.length); }
}

// ---- queue ----------------------------------------------------------------------------------

const queueUi = { view: 'active', user: '', team: '', status: '', group: '', sort: '-id', offset: 0, limit: 100, open: new Set() };

function queuePath(extra) {
  const q = new URLSearchParams();
  const p = Object.assign({}, queueUi, extra || {});
  q.set('view', p.view);
  for (const k of ['user', 'team', 'status', 'group']) if (p[k]) q.set(k, p[k]);
  q.set('sort', p.sort);
  q.set('offset', p.offset);
  q.set('limit', p.limit);
  return '/v1/dashboard/queue?' + q.toString();
}

function jobRow(j, child) {
  const acc = j.resources ? resText(j.resources) : '';
  return h('tr', { class: child ? 'child' : '', dataset: { job: j.id } },
    h('td', {}, h('a', { href: `#/job/${j.id}` }, String(j.id))),
    h('td', {}, j.name), h('td', {}, j.user), h('td', {}, statusEl(j.status)), h('td', {}, String(j.priority)),
    h('td', { class: 'small' }, acc + (j.num_nodes > 1 ? ` ×${j.num_nodes} nodes` : '')),
    h('td', { class: 'small muted' }, ago(j.submitted_at)),
    h('td', { class: 'reason' }, j.status === 'PENDING' || j.status === 'FAILED' || j.status === 'CANCELLED' ? j.reason
      // a container job's image being pulled (docs/task-yaml.md "Containers"): say so, where, and
      // how far the download got ("pulling image REF on NODE: 2 layers, 182.4 MB downloaded")
      : j.status === 'STARTING' && (j.reason || '').startsWith('pulling image') ? pullingOn(j)
        : (j.placement || []).map((p) => p.node).join(', ')));
}

function pullingOn(j) {
  const cut = j.reason.indexOf(': ');  // an image reference holds no space
  const nodes = (j.placement || []).map((p) => p.node).join(', ');
  return cut < 0 ? `${j.reason} on ${nodes}` : `${j.reason.slice(0, cut)} on ${nodes}${j.reason.slice(cut)}`;
}

async function renderQueue() {
  let page;
  let problem = '';
  try {
    page = await getJson(queuePath());
  } catch (e) {
    if (e instanceof HttpError && e.status === 401) throw e;
    // A bad filter (a group that is not a number): said beside the filters, which stay usable.
    problem = e.message;
    page = { rows: [], offset: 0, total: 0, more: false };
  }
  const groupsOpen = (page.rows || []).filter((r) => r.kind === 'group' && queueUi.open.has(r.group));
  const members = new Map(await Promise.all(groupsOpen.map(async (r) =>
    [r.group, await getJson(queuePath({ group: r.group, offset: 0, limit: 100, sort: 'id' }))])));
  const header = (key, label) => {
    const on = queueUi.sort.replace('-', '') === key;
    return h('th', {
      class: key ? 'sortable' : '', dataset: { sort: key || '' },
      onclick: key ? () => { queueUi.sort = on && !queueUi.sort.startsWith('-') ? '-' + key : key; queueUi.offset = 0; refresh(); } : null,
    }, label + (on ? (queueUi.sort.startsWith('-') ? ' ▼' : ' ▲') : ''));
  };
  const rows = [];
  for (const r of page.rows || []) {
    if (r.kind !== 'group') { rows.push(jobRow(r)); continue; }
    const open = queueUi.open.has(r.group);
    const counts = Object.entries(r.counts || {}).map(([s, n]) => `${n} ${s.toLowerCase()}`).join(' · ');
    rows.push(h('tr', { class: 'group', dataset: { group: r.group } },
      h('td', {}, h('a', { href: '#', onclick: (ev) => { ev.preventDefault(); open ? queueUi.open.delete(r.group) : queueUi.open.add(r.group); refresh(); } },
        (open ? '▾ ' : '▸ ') + `group ${r.group}`)),
      h('td', {}, r.name), h('td', {}, r.user), h('td', {}, statusEl(r.status)), h('td', {}, String(r.priority)),
      h('td', { class: 'small' }, `${r.jobs} jobs of ${resText(r.resources)}`), h('td', { class: 'small muted' }, ago(r.submitted_at)),
      h('td', { class: 'small' }, counts)));
    if (open) {
      const m = members.get(r.group);
      for (const j of m.rows) rows.push(jobRow(j, true));
      if (m.more) rows.push(h('tr', { class: 'child' }, h('td', { colspan: 8, class: 'muted' }, `… ${m.total - m.rows.length} more active jobs of group ${r.group}`)));
    }
  }
  const field = (key, placeholder) => h('input', {
    type: 'search', placeholder, value: queueUi[key], id: `q-${key}`, size: 10,
    onchange: (ev) => { queueUi[key] = ev.target.value.trim(); queueUi.offset = 0; refresh(); },
  });
  const statuses = queueUi.view === 'active' ? ['', 'PENDING', 'STARTING', 'SETTING_UP', 'RUNNING'] : ['', 'SUCCEEDED', 'FAILED', 'CANCELLED'];
  const statusSel = h('select', { id: 'q-status', onchange: (ev) => { queueUi.status = ev.target.value; queueUi.offset = 0; refresh(); } },
    ...statuses.map((s) => h('option', { value: s, selected: s === queueUi.status }, s || 'any status')));
  const tab = (v, label) => h('button', { class: queueUi.view === v ? 'on' : '', dataset: { view: v },
    onclick: () => { queueUi.view = v; queueUi.status = ''; queueUi.offset = 0; queueUi.sort = '-id'; refresh(); } }, label);
  const from = page.offset + 1;
  const to = page.offset + (page.rows || []).length;
  setView(
    h('h1', {}, 'Queue'),
    h('div', { class: 'filters' }, h('span', { class: 'tabs' }, tab('active', 'Active'), ' ', tab('finished', 'Finished')),
      field('user', 'user'), field('team', 'team'), field('group', 'group'), statusSel,
      problem ? h('span', { class: 'error', id: 'q-error' }, problem) : ''),
    h('table', { id: 'queue' },
      h('tr', {}, header('id', 'id'), h('th', {}, 'name'), header(queueUi.view === 'active' ? 'user' : null, 'user'),
        header(queueUi.view === 'active' ? 'status' : null, 'status'), header(queueUi.view === 'active' ? 'priority' : null, 'priority'),
        h('th', {}, 'resources'), h('th', {}, 'submitted'), h('th', {}, queueUi.view === 'active' ? 'why pending / where' : 'reason')),
      rows),
    h('div', { class: 'pager' },
      h('button', { disabled: queueUi.offset === 0, onclick: () => { queueUi.offset = Math.max(0, queueUi.offset - queueUi.limit); refresh(); } }, '‹ Newer'),
      h('span', { class: 'muted', id: 'q-range' }, to >= from ? `${from}–${to}` + (page.total !== null ? ` of ${page.total}` : '') : 'nothing here'),
      h('button', { disabled: !page.more, onclick: () => { queueUi.offset += queueUi.limit; refresh(); } }, 'Older ›')));
}

// ---- a job ----------------------------------------------------------------------------------

const logUi = { job: null, rank: '', offset: 0, attempt: 0, text: '', follower: 0 };

async function followLogs(id, generation) {
  // A long poll per step: the server answers when output arrives or the job ends.
  while (logUi.follower === generation) {
    const q = new URLSearchParams({ offset: logUi.offset, wait_ms: 20000 });
    if (logUi.rank !== '') q.set('rank', logUi.rank);
    if (logUi.attempt) q.set('attempt', logUi.attempt);
    let r;
    try {
      r = await fetch(`/v1/jobs/${id}/logs?` + q, { cache: 'no-store', credentials: 'same-origin' });
    } catch (e) { await new Promise((ok) => setTimeout(ok, 2000)); continue; }
    if (logUi.follower !== generation) return;
    if (!r.ok) {
      const body = await r.json().catch(() => ({}));
      const pre = document.getElementById('logs');
      if (pre && logUi.follower === generation) pre.textContent = body.error || r.statusText;
      return;
    }
    const text = await r.text();
    if (logUi.follower !== generation) return;  // another rank or job since: not ours to show
    const pre = document.getElementById('logs');
    logUi.offset = Number(r.headers.get('X-Berth-Offset') || logUi.offset);
    logUi.attempt = Number(r.headers.get('X-Berth-Attempt') || 0);
    if (text && pre) {
      const atEnd = pre.scrollTop + pre.clientHeight >= pre.scrollHeight - 4;
      pre.append(text);
      if (atEnd) pre.scrollTop = pre.scrollHeight;
    }
    if (r.headers.get('X-Berth-Done') === '1') {
      const note = document.getElementById('log-state');
      if (note) note.textContent = `(attempt ${logUi.attempt}, ended)`;
      return;
    }
  }
}

function startLogs(id, rank) {
  logUi.job = id;
  logUi.rank = rank;
  logUi.offset = 0;
  logUi.attempt = 0;
  logUi.follower += 1;
  const pre = document.getElementById('logs');
  if (pre) pre.replaceChildren();
  followLogs(id, logUi.follower);
}

function mayAct(job) {
  return state.me && (job.user === state.me.user || state.me.role === 'operator' || state.me.role === 'admin');
}

async function renderJob(id) {
  const j = await getJson(`/v1/jobs/${id}`);
  const kv = (pairs) => h('dl', { class: 'kv' }, ...pairs.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)]));
  const active = ['PENDING', 'STARTING', 'SETTING_UP', 'RUNNING'].includes(j.status);
  const cancel = active && mayAct(j) ? h('button', {
    class: 'danger', id: 'cancel',
    onclick: async (ev) => {
      if (!confirm(`Cancel job ${j.id}?`)) return;
      ev.target.disabled = true;
      try {
        await postJson('/v1/jobs/cancel', { ids: [j.id] });
        refresh();
      } catch (e) { alert(e.message); ev.target.disabled = false; }
    },
  }, 'Cancel job') : '';
  const placement = (j.placement || []).map((p) => `rank ${p.rank}: ${p.node}` + (p.gpus.length ? ` GPUs ${p.gpus.join(',')}` : '')).join('\n');
  const attempts = (j.attempts || []).map((a) => h('tr', {},
    h('td', {}, String(a.attempt)), h('td', {}, a.outcome ? statusEl(a.outcome) : 'running'),
    h('td', {}, a.exit_code === null ? '' : String(a.exit_code)),
    h('td', { class: 'small' }, (a.placement || []).map((p) => p.node).join(', ')),
    h('td', { class: 'small muted' }, a.placed_at || ''), h('td', { class: 'small used' }, usedText(a)),
    h('td', { class: 'reason' }, a.reason || '')));
  const events = (j.events || []).map((e) => h('tr', {},
    h('td', { class: 'small muted' }, e.at), h('td', {}, statusEl(e.status)), h('td', {}, String(e.attempt)),
    h('td', { class: 'reason' }, e.reason), h('td', { class: 'small' }, e.by || '')));
  const firstRender = logUi.job !== j.id;
  const rankSel = j.num_nodes > 1 ? h('select', { id: 'rank', onchange: (ev) => startLogs(j.id, ev.target.value) },
    h('option', { value: '', selected: logUi.rank === '' }, 'all ranks'),
    ...Array.from({ length: j.num_nodes }, (_, r) => h('option', { value: String(r), selected: logUi.rank === String(r) }, `rank ${r}`))) : '';
  const existing = firstRender ? null : document.getElementById('logs');
  const logs = existing || h('pre', { class: 'logs', id: 'logs' });
  const logScroll = existing ? existing.scrollTop : 0;  // moving the pane resets its scrolling
  const mayRead = mayAct(j);
  setView(
    h('h1', {}, `Job ${j.id}: ${j.name} `, statusEl(j.status), ' ', cancel),
    h('div', { class: 'row2' },
      h('section', { class: 'panel' }, kv([
        ['user', j.user], ['status', j.status], ['priority', String(j.priority)],
        ['group', j.group === null ? '—' : h('a', { href: '#/queue', onclick: () => { Object.assign(queueUi, { group: String(j.group), view: 'active', offset: 0 }); } }, `group ${j.group}` + (j.rank === null ? '' : ` (index ${j.rank})`))],
        ['resources', resText(j.resources) + (j.num_nodes > 1 ? ` on each of ${j.num_nodes} nodes` : '')],
        ['attempt', String(j.attempt)], ['submitted', j.submitted_at || ''], ['started', j.started_at || '—'], ['ended', j.ended_at || '—'],
        ['exit code', j.exit_code === null ? '—' : String(j.exit_code)],
        ['placement', placement || '—'], ['reason', j.reason || '—'],
      ])),
      h('section', { class: 'panel' }, h('h2', {}, 'Spec'),
        j.spec ? h('pre', { id: 'spec' }, JSON.stringify(j.spec, null, 2)) : h('p', { class: 'muted' }, 'Only its owner and operators may read the spec.'))),
    h('h2', {}, 'Logs ', rankSel, ' ', h('span', { class: 'muted small', id: 'log-state' }, '')),
    mayRead ? logs : h('p', { class: 'muted' }, 'Only its owner and operators may read its logs.'),
    h('h2', {}, 'Attempts'), attempts.length ? h('table', {}, h('tr', {}, ...['attempt', 'outcome', 'exit', 'nodes', 'placed', 'used', 'reason'].map((t) => h('th', {}, t))), attempts) : h('p', { class: 'muted' }, 'Not placed yet.'),
    h('h2', {}, 'Events'), h('table', {}, h('tr', {}, ...['at', 'status', 'attempt', 'reason', 'by'].map((t) => h('th', {}, t))), events));
  if (existing) logs.scrollTop = logScroll;
  if (firstRender && mayRead) startLogs(j.id, '');
}

// ---- routing and polling --------------------------------------------------------------------

function route() {
  const hash = location.hash || '#/';
  const m = hash.match(/^#\/job\/(\d+)/);
  if (m) return { page: 'job', id: Number(m[1]) };
  if (hash.startsWith('#/nodes')) return { page: 'nodes' };
  if (hash.startsWith('#/queue')) return { page: 'queue' };
  return { page: 'overview' };
}

let rendering = false;
let again = false;
async function refresh() {
  if (rendering) {  // asked while drawing (a click, a poll): draw once more when done
    again = true;
    return;
  }
  rendering = true;
  again = false;
  const r = route();
  if (r.page !== 'job') { logUi.follower += 1; logUi.job = null; }
  for (const a of document.querySelectorAll('header nav a')) a.classList.toggle('current', a.dataset.page === r.page);
  try {
    if (r.page === 'nodes') await renderNodes();
    else if (r.page === 'queue') await renderQueue();
    else if (r.page === 'job') await renderJob(r.id);
    else await renderOverview();
    // What was drawn, for tests: "queue:<time>", "job:<id>:<time>".
    document.body.dataset.rendered = `${r.page}:${r.id ? r.id + ':' : ''}${Date.now()}`;
  } catch (e) {
    showError(e);
  } finally {
    rendering = false;
  }
  if (again) refresh();
}

function stopPolling() {
  if (state.timer) clearInterval(state.timer);
  state.timer = null;
}

function startPolling() {
  stopPolling();
  state.timer = setInterval(() => {
    // A user typing in a filter is not interrupted; a hidden tab asks nothing.
    if (document.hidden) return;
    const focused = document.activeElement;
    if (focused && focused.tagName === 'INPUT' && focused.type !== 'password' && focused.id !== 'node-filter') return;
    // A big cluster's node map is a big answer: every 10 s rather than every 2.
    if (route().page === 'nodes' && nodesUi.count > 500 && Date.now() - nodesUi.drawnAt < 10000) return;
    refresh();
  }, POLL_MS);
}

async function start() {
  try {
    state.me = await getJson('/v1/dashboard/session');
  } catch (e) {
    return showLogin(e.message);
  }
  state.csrf = state.me.csrf;
  document.getElementById('who').textContent = `${state.me.user} (${state.me.role})`;
  const logout = document.getElementById('logout');
  logout.hidden = !state.csrf;
  logout.onclick = async () => { await postJson('/v1/dashboard/logout').catch(() => {}); state.me = null; showLogin(''); };
  await refresh();
  startPolling();
}

window.addEventListener('hashchange', () => { hideTip(); refresh(); });
document.addEventListener('visibilitychange', () => { if (!document.hidden && state.timer) refresh(); });
start();
