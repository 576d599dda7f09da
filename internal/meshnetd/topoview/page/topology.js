// meshnet's topology page: draws one namespace from the data API's Node Graph
// frames (the ones Grafana reads), polled, and shows both ends of a clicked
// edge. Plain script, no library: the layout is a small force-directed pass
// that runs only when the set of nodes changes, so a refresh never moves
// anything. Every value from the API is set as text, never as markup.
'use strict';

const pollMillis = 500;
const svgNS = 'http://www.w3.org/2000/svg';
const namespace = new URLSearchParams(location.search).get('namespace') || '';
// Relative, so that the page works under any prefix that also relays /v1/.
const api = '../v1/namespaces/' + encodeURIComponent(namespace) + '/graph';

const graph = document.getElementById('graph');
const statusLine = document.getElementById('status');
const layers = { edges: group('edges'), labels: group('labels'), nodes: group('nodes') };
const pos = new Map(); // node id -> {x, y}
const drawn = { nodes: new Map(), edges: new Map() }; // id -> SVG group
let selected = '';
let lastNodes = new Map(); // node id -> the last nodes frame's row
let layoutKey = '';

function group(cls) {
  const g = document.createElementNS(svgNS, 'g');
  g.setAttribute('class', cls);
  graph.appendChild(g);
  return g;
}

function el(name, attrs, parent) {
  const e = document.createElementNS(svgNS, name);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  if (parent) parent.appendChild(e);
  return e;
}

// byName orders ids as people count: r2 before r10.
const byName = (a, b) => a.localeCompare(b, undefined, { numeric: true });

// layout places new nodes and relaxes the drawing when the node set changed:
// the first time on a circle (a ring stays a ring), later ones next to a
// neighbour; then a Fruchterman-Reingold pass, fewer rounds for big graphs.
function layout(nodes, edges) {
  const key = nodes.map(n => n.id).sort().join('\n') + '\n\n' + edges.map(e => e.source + ' ' + e.target).sort().join('\n');
  if (key === layoutKey) return false;
  layoutKey = key;
  const ids = new Set(nodes.map(n => n.id));
  for (const id of pos.keys()) if (!ids.has(id)) pos.delete(id);
  const fresh = nodes.map(n => n.id).filter(id => !pos.has(id)).sort(byName);
  const k = 120; // ideal edge length
  if (pos.size === 0) {
    const r = Math.max(k, (k * fresh.length) / (2 * Math.PI));
    fresh.forEach((id, i) => {
      const a = (2 * Math.PI * i) / fresh.length - Math.PI / 2;
      pos.set(id, { x: r * Math.cos(a), y: r * Math.sin(a) });
    });
  } else {
    for (const id of fresh) {
      const e = edges.find(e => (e.source === id && pos.has(e.target)) || (e.target === id && pos.has(e.source)));
      const n = e ? pos.get(e.source === id ? e.target : e.source) : { x: 0, y: 0 };
      pos.set(id, { x: n.x + k * (Math.random() - 0.5), y: n.y + k * (Math.random() - 0.5) });
    }
  }
  relax(nodes.map(n => n.id), edges, k);
  return true;
}

function relax(ids, edges, k) {
  const n = ids.length;
  if (n < 3) return;
  const rounds = Math.max(20, Math.min(300, Math.floor(200000 / (n * n))));
  let t = k; // how far a node may move in one round; cools to nothing
  for (let round = 0; round < rounds; round++) {
    const d = new Map(ids.map(id => [id, { x: 0, y: 0 }]));
    for (let i = 0; i < n; i++) {
      const a = pos.get(ids[i]);
      for (let j = i + 1; j < n; j++) {
        const b = pos.get(ids[j]);
        let dx = a.x - b.x, dy = a.y - b.y;
        const dist = Math.max(1, Math.hypot(dx, dy));
        const f = (k * k) / dist / dist;
        dx *= f; dy *= f;
        d.get(ids[i]).x += dx; d.get(ids[i]).y += dy;
        d.get(ids[j]).x -= dx; d.get(ids[j]).y -= dy;
      }
    }
    for (const e of edges) {
      if (e.source === e.target) continue;
      const a = pos.get(e.source), b = pos.get(e.target);
      const dx = a.x - b.x, dy = a.y - b.y;
      const dist = Math.max(1, Math.hypot(dx, dy));
      const f = dist / k;
      d.get(e.source).x -= dx * f; d.get(e.source).y -= dy * f;
      d.get(e.target).x += dx * f; d.get(e.target).y += dy * f;
    }
    for (const id of ids) {
      const p = pos.get(id), v = d.get(id);
      const len = Math.max(1e-9, Math.hypot(v.x, v.y));
      p.x += (v.x / len) * Math.min(len, t);
      p.y += (v.y / len) * Math.min(len, t);
    }
    t *= 0.97;
  }
}

function fit() {
  let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
  for (const p of pos.values()) {
    x0 = Math.min(x0, p.x); y0 = Math.min(y0, p.y);
    x1 = Math.max(x1, p.x); y1 = Math.max(y1, p.y);
  }
  if (x0 === Infinity) return;
  // Big graphs shrink to fit; small ones keep their size, centred.
  const pad = 80, box = graph.getBoundingClientRect();
  const w = Math.max(x1 - x0 + 2 * pad, box.width), h = Math.max(y1 - y0 + 2 * pad, box.height);
  graph.setAttribute('viewBox', [(x0 + x1 - w) / 2, (y0 + y1 - h) / 2, w, h].join(' '));
}

// curve is an edge's path: straight for one link between two nodes, bowed
// apart for several, a loop for a link of a pod to itself.
function curve(e, i, count) {
  const a = pos.get(e.source), b = pos.get(e.target);
  if (e.source === e.target) {
    const r = 22 + 10 * i;
    return { d: `M ${a.x} ${a.y} c ${-r} ${-2.5 * r} ${r} ${-2.5 * r} 0 0`, length: 4 * r, at: t => ({ x: a.x + (t - 0.5) * r, y: a.y - 1.9 * r }) };
  }
  const bow = (i - (count - 1) / 2) * 28;
  const dx = b.x - a.x, dy = b.y - a.y, len = Math.max(1, Math.hypot(dx, dy));
  const c = { x: (a.x + b.x) / 2 - (dy / len) * bow * 2, y: (a.y + b.y) / 2 + (dx / len) * bow * 2 };
  const at = t => ({
    x: (1 - t) * (1 - t) * a.x + 2 * (1 - t) * t * c.x + t * t * b.x,
    y: (1 - t) * (1 - t) * a.y + 2 * (1 - t) * t * c.y + t * t * b.y,
  });
  return { d: `M ${a.x} ${a.y} Q ${c.x} ${c.y} ${b.x} ${b.y}`, length: len, at };
}

function rate(bps) {
  if (!(bps > 0)) return '';
  const units = ['bit/s', 'kbit/s', 'Mbit/s', 'Gbit/s'];
  let i = 0;
  while (bps >= 1000 && i < units.length - 1) { bps /= 1000; i++; }
  return (bps < 10 ? bps.toFixed(1) : Math.round(bps)) + ' ' + units[i];
}

function drawEdges(edges) {
  const pairs = new Map();
  for (const e of edges) {
    const key = [e.source, e.target].sort().join('\n');
    if (!pairs.has(key)) pairs.set(key, []);
    pairs.get(key).push(e);
  }
  const seen = new Set();
  for (const group of pairs.values()) {
    group.forEach((e, i) => {
      seen.add(e.id);
      let g = drawn.edges.get(e.id);
      if (!g) {
        g = el('g', { 'data-id': e.id });
        el('path', { class: 'edge-hit' }, g);
        el('path', { class: 'edge' }, g);
        const label = el('g', { 'data-id': e.id }, layers.labels);
        el('text', { class: 'edge-label' }, label);
        el('text', { class: 'intf src' }, label);
        el('text', { class: 'intf dst' }, label);
        g.label = label;
        g.addEventListener('click', () => select(e.id));
        label.addEventListener('click', () => select(e.id));
        layers.edges.appendChild(g);
        drawn.edges.set(e.id, g);
      }
      const c = curve(e, i, group.length);
      const [hit, line] = g.children;
      hit.setAttribute('d', c.d);
      line.setAttribute('d', c.d);
      line.setAttribute('class', 'edge state-' + e.detail__state + (e.id === selected ? ' selected' : ''));
      line.dataset.state = e.detail__state;
      g.dataset.state = e.detail__state;
      const [text, src, dst] = g.label.children;
      const mid = c.at(0.5), s = aside(c, near(c, 0)), d = aside(c, 1 - near(c, 1));
      const words = [e.detail__netem, rate(e.detail__rate_bps), e.detail__state === 'up' ? '' : e.detail__state,
        e.detail__faults ? 'held by ' + e.detail__faults : ''].filter(Boolean);
      place(text, mid, words.join(' · '));
      place(src, s, e.detail__source_interface);
      place(dst, d, e.detail__target_interface);
      let title = g.querySelector('title');
      if (!title) title = el('title', {}, g);
      title.textContent = `${e.id} (${e.detail__kind}, ${e.detail__state})` + (e.detail__faults ? '\nheld by LinkFault ' + e.detail__faults : '') + (e.detail__error ? '\n' + e.detail__error : '');
    });
  }
  for (const [id, g] of drawn.edges) {
    if (!seen.has(id)) { g.label.remove(); g.remove(); drawn.edges.delete(id); }
  }
}

// near is how far along curve c, from its end at t (0 or 1), that end's
// interface name goes: clear of the node's circle, and further on a way down,
// where the node's title and subtitle are.
function near(c, t) {
  const p = c.at(t), q = c.at(t === 0 ? 0.05 : 0.95);
  const down = Math.max(0, (q.y - p.y) / Math.max(1e-9, Math.hypot(q.x - p.x, q.y - p.y)));
  return Math.min(0.4, (32 + 34 * down) / Math.max(1, c.length));
}

// aside is the point at t on curve c, moved 8 px to the left of its way.
function aside(c, t) {
  const p = c.at(t), q = c.at(Math.min(1, t + 0.01)), r = c.at(Math.max(0, t - 0.01));
  const dx = q.x - r.x, dy = q.y - r.y, len = Math.max(1e-9, Math.hypot(dx, dy));
  return { x: p.x + (dy / len) * 8, y: p.y - (dx / len) * 8 + 3 };
}

function place(text, p, s) {
  text.setAttribute('x', p.x);
  text.setAttribute('y', p.y);
  text.textContent = s || '';
}

function drawNodes(nodes) {
  const seen = new Set();
  for (const n of nodes) {
    seen.add(n.id);
    let g = drawn.nodes.get(n.id);
    if (!g) {
      g = el('g', { 'data-id': n.id, 'data-kind': n.detail__kind }, layers.nodes);
      if (n.detail__kind === 'pod') el('circle', { class: 'shape', r: 18 }, g);
      else if (n.detail__kind === 'physical') el('rect', { class: 'shape', x: -18, y: -14, width: 36, height: 28, rx: 3 }, g);
      else el('path', { class: 'shape', d: 'M 0 -18 L 18 0 L 0 18 L -18 0 Z' }, g);
      el('text', { class: 'stat' }, g);
      el('text', { class: 'title', y: 34 }, g);
      el('text', { class: 'subtitle', y: 47 }, g);
      el('title', {}, g);
      drawn.nodes.set(n.id, g);
    }
    const p = pos.get(n.id);
    g.setAttribute('transform', `translate(${p.x} ${p.y})`);
    g.setAttribute('class', `node kind-${n.detail__kind} color-${n.color}`);
    const [, stat, title, subtitle, tip] = g.children;
    stat.textContent = n.secondarystat > 0 ? `${n.mainstat}/${n.secondarystat}` : '';
    title.textContent = n.title;
    subtitle.textContent = n.subtitle;
    tip.textContent = [n.title, n.detail__kind, n.detail__node && 'node ' + n.detail__node, n.detail__phase,
      n.detail__vtep && 'VTEP ' + n.detail__vtep].filter(Boolean).join(' · ');
  }
  for (const [id, g] of drawn.nodes) {
    if (!seen.has(id)) { g.remove(); drawn.nodes.delete(id); }
  }
}

function say(text, error) {
  statusLine.textContent = text;
  statusLine.classList.toggle('error', !!error);
  graph.classList.toggle('stale', !!error);
}

// The token the page reads with: meshnetd serves a namespace's links to
// whoever may list its Topologies (unless it runs with --read-open). Kept
// for this tab only, sent to this origin only.
const tokenInput = document.getElementById('token');
tokenInput.value = sessionStorage.getItem('meshnet-token') || '';
tokenInput.addEventListener('change', () => sessionStorage.setItem('meshnet-token', tokenInput.value.trim()));

// get returns the JSON of an API path, or throws with the API's message.
async function get(path) {
  const headers = { accept: 'application/json' };
  const token = tokenInput.value.trim();
  if (token) headers.authorization = 'Bearer ' + token;
  const resp = await fetch(path, { headers });
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) {
    const why = body.message || resp.statusText;
    const hint = resp.status === 401 || resp.status === 403
      ? ` (paste a token that may list the namespace's Topologies, e.g. kubectl -n meshnet create token meshnet-operator --audience meshnetd)` : '';
    throw new Error(`GET ${path}: ${resp.status} ${why}` + hint);
  }
  return body;
}

async function poll() {
  const start = performance.now();
  try {
    const g = await get(api);
    const nodes = g.nodes || [], edges = g.edges || [];
    if (layout(nodes, edges)) fit();
    drawEdges(edges);
    drawNodes(nodes);
    lastNodes = new Map(nodes.map(n => [n.id, n]));
    const pods = nodes.filter(n => n.detail__kind === 'pod').length;
    const up = edges.filter(e => e.detail__state === 'up').length;
    say(`${namespace}: ${pods} pods, ${nodes.length - pods} other nodes, ${edges.length} links (${up} up) · read ${new Date().toLocaleTimeString()}`);
    graph.dataset.polls = String(Number(graph.dataset.polls || 0) + 1);
    if (selected) await showDetail();
  } catch (err) {
    say(err.message, true);
  }
  // A big namespace costs meshnetd more to draw: never ask again sooner
  // than three times what the last answer took.
  setTimeout(poll, Math.max(pollMillis, 3 * (performance.now() - start)));
}

function select(id) {
  selected = id;
  for (const [eid, g] of drawn.edges) g.children[1].classList.toggle('selected', eid === id);
  showDetail();
}

// The link's kind is in the summary line, spelled as the Topology spells it;
// an end's admin state is LINK_STATE_UP or LINK_STATE_DOWN.
const stateWord = s => (s || '').replace(/^LINK_STATE_/, '').toLowerCase();

// endRows are the detail table's rows: a label and a getter of an end.
const endRows = [
  ['pod', x => x.pod],
  ['interface', x => x.interface],
  ['node', x => x.node],
  ['admin state', x => stateWord(x.link && x.link.adminState)],
  ['carrier', x => x.link ? (x.link.carrier ? 'yes' : 'no') : ''],
  ['MTU', x => x.link && x.link.mtu],
  ['addresses', x => x.link && (x.link.addresses || []).join(', ')],
  ['VNI', x => x.link && x.link.vxlan && x.link.vxlan.vni],
  ['local VTEP', x => x.link && x.link.vxlan && [x.link.vxlan.localVtep, x.link.vxlan.parent].filter(Boolean).join(' on ')],
  ['remote VTEP', x => x.link && x.link.vxlan && x.link.vxlan.remoteVtep],
  ['netem', x => x.netem],
  ['qdisc', x => x.link && x.link.qdiscKind],
  ['tx bytes / packets', x => counters(x, 'tx', 'Bytes', 'Packets')],
  ['rx bytes / packets', x => counters(x, 'rx', 'Bytes', 'Packets')],
  ['tx / rx drops', x => pair(x, 'Drops')],
  ['tx / rx errors', x => pair(x, 'Errors')],
  ['last error', x => x.link && x.link.lastError],
  ['not read', x => x.error],
];

// pair is an end's sent and received count of kind, empty when unread.
function pair(x, kind) {
  return x.link && x.link.counters ? counters(x, 'tx', kind, '') + ' / ' + counters(x, 'rx', kind, '') : '';
}

function counters(x, dir, a, b) {
  const c = x.link && x.link.counters;
  if (!c) return '';
  const v = k => Number(c[dir + k] || 0).toLocaleString();
  return b ? `${v(a)} / ${v(b)}` : v(a);
}

async function showDetail() {
  const id = selected;
  const panel = document.getElementById('detail');
  let d;
  try {
    d = await get(api + '/edges/' + encodeURIComponent(id));
  } catch (err) {
    if (id !== selected) return;
    panel.hidden = false;
    document.getElementById('detail-title').textContent = id;
    document.getElementById('detail-summary').textContent = err.message;
    document.getElementById('detail-ends').replaceChildren();
    return;
  }
  if (id !== selected) return;
  const e = d.edge;
  panel.hidden = false;
  document.getElementById('detail-title').textContent = e.id;
  document.getElementById('detail-summary').textContent =
    [e.detail__kind, e.detail__state, e.detail__vni ? 'VNI ' + e.detail__vni : '', 'uid ' + e.detail__uid, e.detail__error].filter(Boolean).join(' · ');
  const ends = d.ends || [];
  if (ends.length === 1) {
    // The far end is a physical device or a host NIC: what the edge knows of it.
    // Its row in the pod column names it by its title and kind.
    const far = lastNodes.get(e.target) || { title: e.target, detail__kind: '', subtitle: '' };
    const what = far.detail__kind === 'physical' ? ' (physical device, VTEP ' + far.subtitle + ')' : far.detail__kind === 'host' ? ' (host NIC)' : '';
    ends.push({ pod: far.title + what, interface: e.detail__target_interface, node: far.detail__kind === 'host' ? far.subtitle : '', error: '' });
  }
  const table = document.getElementById('detail-ends');
  const rows = [];
  const head = document.createElement('tr');
  head.append(document.createElement('th'));
  for (const x of ends) {
    const th = document.createElement('th');
    th.textContent = x === ends[0] ? 'source end' : 'target end';
    head.append(th);
  }
  rows.push(head);
  for (const [label, value] of endRows) {
    const cells = ends.map(x => value(x));
    if (cells.every(v => v === undefined || v === null || v === '')) continue;
    const tr = document.createElement('tr');
    const th = document.createElement('th');
    th.textContent = label;
    tr.append(th);
    for (const v of cells) {
      const td = document.createElement('td');
      td.textContent = v === undefined || v === null ? '' : String(v);
      if (label === 'last error' || label === 'not read') td.className = 'error';
      tr.append(td);
    }
    rows.push(tr);
  }
  table.replaceChildren(...rows);
}

document.getElementById('close').addEventListener('click', () => {
  selected = '';
  document.getElementById('detail').hidden = true;
  for (const g of drawn.edges.values()) g.children[1].classList.remove('selected');
});

window.addEventListener('resize', fit);
document.getElementById('namespace').value = namespace;
if (namespace) {
  document.title = namespace + ' · meshnet topology';
  poll();
} else {
  say('name a namespace to draw');
}
