// The map of the papers: every paper a dot on one <canvas>, coloured by its topic, with the
// topics' labels near their papers' median places, none over another label or a dot. /map is loaded once; the dots are drawn from
// typed arrays onto an offscreen canvas, and hover and keyboard only redraw the one highlighted
// dot, so there is no element per paper and 100,000 papers draw like 86. Uses app.js's $,
// request, openPaper.
"use strict";

const LABEL_DOT_CHECK = 2000;  // papers up to which labels keep off the dots (each label scans them all)
const LABEL_RINGS = 24;  // rings, 12 px apart, around a topic's median where its label is tried
const LABEL_ANGLES = 16;  // places tried on each ring
const MAP_PAD = 24;      // px around the dots, so that edge dots and labels stay inside
const MAP_GRID = 64;     // cells per side of the grid that finds the dot under the pointer
const MAP_REACH = 10;    // px: how near the pointer a dot must be to be picked
const map = { loaded: null, n: 0, only: null, selected: -1, width: 0, height: 0 };

// Tableau's ten colours, then hues a golden angle apart; its grey, paler, for the papers no topic fits.
const PALETTE = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f"];
const OTHER_COLOUR = "#c7c7c7";

function topicColour(t) {
  if (t.other) return OTHER_COLOUR;
  return t.id < PALETTE.length ? PALETTE[t.id] : `hsl(${(t.id * 137.508) % 360} 60% 45%)`;
}

async function loadMap() {
  if (!map.loaded) {
    map.loaded = request("/map").then((r) => r.json()).then((data) => {
      const n = data.papers.length;
      Object.assign(map, {
        n, topics: data.topics, ids: new Array(n), names: new Array(n),
        x: new Float32Array(n), y: new Float32Array(n), topic: new Int32Array(n),
      });
      data.papers.forEach((p, i) => {
        map.ids[i] = p.paper_id; map.names[i] = p.name; map.x[i] = p.x; map.y[i] = p.y; map.topic[i] = p.topic;
      });
      map.index = new Map(map.ids.map((id, i) => [id, i]));
      map.grid = bucket((i) => Math.min(MAP_GRID - 1, Math.floor(map.x[i] * MAP_GRID)) * MAP_GRID
        + Math.min(MAP_GRID - 1, Math.floor(map.y[i] * MAP_GRID)), MAP_GRID * MAP_GRID);
      map.byTopic = bucket((i) => map.topic[i], Math.max(0, ...map.topics.map((t) => t.id)) + 1);
    }).catch((err) => { map.loaded = null; throw err; });
  }
  return map.loaded;
}

// Points grouped by key(i) in [0, keys) with a counting sort: {start, order}, the points of
// key k being order[start[k] .. start[k + 1]).
function bucket(key, keys) {
  const start = new Int32Array(keys + 1), keyOf = new Int32Array(map.n);
  for (let i = 0; i < map.n; i++) { keyOf[i] = key(i); start[keyOf[i] + 1]++; }
  for (let k = 0; k < keys; k++) start[k + 1] += start[k];
  const order = new Int32Array(map.n), next = start.slice(0, keys);
  for (let i = 0; i < map.n; i++) order[next[keyOf[i]]++] = i;
  return { start, order };
}

function toScreen(i) {
  return [MAP_PAD + map.x[i] * (map.width - 2 * MAP_PAD), MAP_PAD + (1 - map.y[i]) * (map.height - 2 * MAP_PAD)];
}

// Where a paper's dot is in the window (for the tip; tests point at it).
function mapPointOf(paperId) {
  const i = map.index?.get(paperId);
  if (i === undefined) return null;
  const [x, y] = toScreen(i), box = $("map-canvas").getBoundingClientRect();
  return { x: box.left + x, y: box.top + y };
}

function drawMap() {
  const canvas = $("map-canvas"), dpr = window.devicePixelRatio || 1;
  map.width = canvas.parentElement.clientWidth;
  map.height = Math.max(320, Math.min(map.width * 0.7, window.innerHeight - 220));
  canvas.style.height = `${map.height}px`;
  canvas.width = Math.round(map.width * dpr);
  canvas.height = Math.round(map.height * dpr);
  const base = map.base = document.createElement("canvas");
  base.width = canvas.width; base.height = canvas.height;
  const g = base.getContext("2d");
  g.scale(dpr, dpr);
  const size = map.n > 20000 ? 1.5 : map.n > 2000 ? 2.5 : 4;  // squares when many, else round dots
  // the chosen topic's dots over the others, and the topics' over those no topic fits
  const under = [...map.topics].sort((a, b) => Number(b.other) - Number(a.other));
  for (const faded of [true, false]) {
    for (const t of under) {
      if ((map.only !== null && map.only !== t.id) !== faded) continue;
      g.fillStyle = topicColour(t);
      g.globalAlpha = faded ? 0.15 : 1;
      g.beginPath();
      const { start, order } = map.byTopic;
      for (let k = start[t.id]; k < start[t.id + 1]; k++) {
        const [x, y] = toScreen(order[k]);
        if (map.n > 2000) g.rect(x - size / 2, y - size / 2, size, size);
        else { g.moveTo(x + size, y); g.arc(x, y, size, 0, 2 * Math.PI); }
      }
      g.fill();
    }
  }
  g.globalAlpha = 1;
  g.font = "600 13px system-ui, sans-serif";
  g.textAlign = "center";
  g.textBaseline = "middle";
  g.lineJoin = "round";
  // Dots a label may not cover (checked while there are few enough to scan for each label).
  const dots = map.n <= LABEL_DOT_CHECK ? Array.from({ length: map.n }, (_, i) => toScreen(i)) : [];
  const placed = [];
  for (const t of [...map.topics].sort((a, b) => b.size - a.size)) {  // the largest topics placed first
    const { start, order } = map.byTopic;
    const count = start[t.id + 1] - start[t.id];
    // no label for the papers no topic fits: they lie anywhere, their median names no place
    if (!count || t.other || (map.only !== null && map.only !== t.id)) continue;
    // near the median of its dots: a topic is a subject, not a region, so its dots may lie in
    // several places, and a mean could fall in a gap between them
    const xs = new Float32Array(count), ys = new Float32Array(count);
    for (let k = 0; k < count; k++) [xs[k], ys[k]] = toScreen(order[start[t.id] + k]);
    const mid = count >> 1;
    const box = labelBox(xs.sort()[mid], ys.sort()[mid], g.measureText(t.label).width + 4, 16, placed, dots, size);
    placed.push(box);
    const [x, y] = [box.x + box.w / 2, box.y + box.h / 2];
    g.lineWidth = 4; g.strokeStyle = "rgba(255,255,255,.9)";
    g.strokeText(t.label, x, y);
    g.fillStyle = "#1d232a";
    g.fillText(t.label, x, y);
  }
  // Where the labels went, and the dots when few (the tests check that no two overlap).
  canvas.dataset.labels = JSON.stringify(placed.map((b) => [b.x, b.y, b.w, b.h].map((v) => Math.round(v * 10) / 10)));
  canvas.dataset.dots = JSON.stringify(dots.map(([x, y]) => [Math.round(x * 10) / 10, Math.round(y * 10) / 10]));
  canvas.dataset.dotRadius = String(size);
  canvas.dataset.papers = String(map.n);
  canvas.setAttribute("aria-label", `Map of ${map.n} papers in ${map.topics.length} topics`);
  highlight(map.selected);
}

// A label's box (w x h px) nearest (x, y) that overlaps no label already placed nor any of `dots`
// (radius r), inside the frame; tried on rings around (x, y), else the least covered place.
function labelBox(x, y, w, h, placed, dots, r) {
  const covered = (b) =>
    placed.filter((o) => b.x < o.x + o.w && o.x < b.x + b.w && b.y < o.y + o.h && o.y < b.y + b.h).length * 1000 +
    dots.filter(([dx, dy]) => dx + r > b.x && dx - r < b.x + b.w && dy + r > b.y && dy - r < b.y + b.h).length;
  let best = null, cost = Infinity;
  for (let ring = 0; ring < LABEL_RINGS * 12; ring += 12) {
    for (let k = 0; k < (ring ? LABEL_ANGLES : 1); k++) {
      const angle = (k / LABEL_ANGLES) * 2 * Math.PI;
      const bx = Math.min(Math.max(x + ring * Math.cos(angle) - w / 2, 0), map.width - w);
      const by = Math.min(Math.max(y + ring * 0.6 * Math.sin(angle) - h / 2, 0), map.height - h);
      const box = { x: bx, y: by, w, h }, c = covered(box);
      if (c < cost) { best = box; cost = c; }
      if (!c) return box;
    }
  }
  return best;
}

// The label of the topic nearest paper i on the map, among the named ones: where a paper of
// "other subjects" stands closest.
function nearestTopic(i) {
  let best = null, distance = Infinity;
  for (let j = 0; j < map.n; j++) {
    const t = map.topics.find((topic) => topic.id === map.topic[j]);
    if (j === i || !t || t.other) continue;
    const d = (map.x[j] - map.x[i]) ** 2 + (map.y[j] - map.y[i]) ** 2;
    if (d < distance) { distance = d; best = t; }
  }
  return best;
}

// Draw the map with paper i ringed and its name in the tip (-1: none).
function highlight(i) {
  const canvas = $("map-canvas"), g = canvas.getContext("2d"), dpr = window.devicePixelRatio || 1;
  g.setTransform(1, 0, 0, 1, 0, 0);
  g.clearRect(0, 0, canvas.width, canvas.height);
  g.drawImage(map.base, 0, 0);
  const tip = $("map-tip");
  map.selected = i;
  if (i < 0) { tip.hidden = true; return; }
  const [x, y] = toScreen(i);
  g.scale(dpr, dpr);
  g.lineWidth = 2; g.strokeStyle = "#1d232a";
  g.beginPath(); g.arc(x, y, 7, 0, 2 * Math.PI); g.stroke();
  const topic = map.topics.find((t) => t.id === map.topic[i]);
  const near = topic && topic.other ? nearestTopic(i) : null;
  const where = topic ? (near ? `${topic.label}, nearest ${near.label}` : topic.label) : "";
  tip.textContent = where ? `${map.names[i]} · ${where}` : map.names[i];
  tip.hidden = false;
  tip.style.left = `${Math.min(x + 12, map.width - tip.offsetWidth - 4)}px`;
  tip.style.top = `${Math.max(y - 32, 0)}px`;
}

// The dot within MAP_REACH px of (px, py) on the canvas, nearest first; -1 when none.
function dotAt(px, py) {
  const w = map.width - 2 * MAP_PAD, h = map.height - 2 * MAP_PAD;
  const nx = (px - MAP_PAD) / w, ny = 1 - (py - MAP_PAD) / h;
  const reach = Math.ceil((MAP_REACH / Math.min(w, h)) * MAP_GRID);
  const cx = Math.floor(nx * MAP_GRID), cy = Math.floor(ny * MAP_GRID);
  let best = -1, bestDistance = MAP_REACH * MAP_REACH;
  for (let gx = Math.max(0, cx - reach); gx <= Math.min(MAP_GRID - 1, cx + reach); gx++) {
    for (let gy = Math.max(0, cy - reach); gy <= Math.min(MAP_GRID - 1, cy + reach); gy++) {
      const cell = gx * MAP_GRID + gy, { start, order } = map.grid;
      for (let k = start[cell]; k < start[cell + 1]; k++) {
        const i = order[k];
        if (map.only !== null && map.topic[i] !== map.only) continue;
        const [x, y] = toScreen(i), d = (x - px) ** 2 + (y - py) ** 2;
        if (d <= bestDistance) { best = i; bestDistance = d; }
      }
    }
  }
  return best;
}

// From dot `from`, the nearest dot in the direction of an arrow key (within 45 degrees of it).
function dotToward(from, dx, dy) {
  if (from < 0) return 0;  // the first paper: a start anyone can find again
  const [fx, fy] = toScreen(from);
  let best = from, bestDistance = Infinity;
  for (let i = 0; i < map.n; i++) {
    if (i === from || (map.only !== null && map.topic[i] !== map.only)) continue;
    const [x, y] = toScreen(i), along = (x - fx) * dx + (y - fy) * dy;
    const across = Math.abs((x - fx) * dy - (y - fy) * dx);
    if (along <= 0 || across > along) continue;
    const d = (x - fx) ** 2 + (y - fy) ** 2;
    if (d < bestDistance) { best = i; bestDistance = d; }
  }
  return best;
}

function renderTopics() {
  const list = $("map-topics");
  list.replaceChildren();
  // the largest first, the papers no topic fits last
  for (const t of [...map.topics].sort((a, b) => Number(a.other) - Number(b.other) || b.size - a.size)) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.setAttribute("aria-pressed", String(map.only === t.id));
    button.title = t.other ? "Papers with no close neighbours in any topic" : t.words.join(", ");
    const swatch = document.createElement("span");
    swatch.className = "swatch";
    swatch.style.background = topicColour(t);
    button.append(swatch, `${t.label} (${t.size})`);
    button.addEventListener("click", () => {
      map.only = map.only === t.id ? null : t.id;
      map.selected = -1;
      renderTopics();
      drawMap();
    });
    item.append(button);
    list.append(item);
  }
}

async function showMap(show) {
  $("map-view").hidden = !show;
  document.querySelector(".chat").hidden = show;
  $("show-map").setAttribute("aria-pressed", String(show));
  if (!show) return;
  try {
    await loadMap();
  } catch (err) {
    $("map-tip").hidden = false;
    $("map-tip").textContent = err.message;
    return;
  }
  renderTopics();
  drawMap();
  drawnWidth = mapCanvas.parentElement.clientWidth;
  $("map-canvas").focus();
}

const mapCanvas = $("map-canvas");
mapCanvas.addEventListener("mousemove", (e) => {
  if (!map.n) return;
  const box = mapCanvas.getBoundingClientRect();
  const i = dotAt(e.clientX - box.left, e.clientY - box.top);
  if (i !== map.selected) highlight(i);
  mapCanvas.style.cursor = i >= 0 ? "pointer" : "default";
});
mapCanvas.addEventListener("mouseleave", () => { if (map.n) highlight(-1); });
mapCanvas.addEventListener("click", (e) => {
  const box = mapCanvas.getBoundingClientRect();
  const i = map.n ? dotAt(e.clientX - box.left, e.clientY - box.top) : -1;
  if (i >= 0) openPaper(map.ids[i]);
});
const ARROWS = { ArrowRight: [1, 0], ArrowLeft: [-1, 0], ArrowUp: [0, -1], ArrowDown: [0, 1] };
mapCanvas.addEventListener("keydown", (e) => {
  if (!map.n) return;
  if (ARROWS[e.key]) {
    e.preventDefault();
    highlight(dotToward(map.selected, ...ARROWS[e.key]));
  } else if (e.key === "Enter" && map.selected >= 0) {
    e.preventDefault();
    openPaper(map.ids[map.selected]);
  }
});
$("show-map").addEventListener("click", () => showMap($("map-view").hidden));
// Drawn again when its frame changes width (the window, or a paper opened beside it).
let drawnWidth = 0;
new ResizeObserver(() => {
  const width = mapCanvas.parentElement.clientWidth;
  if (map.n && width && width !== drawnWidth && !$("map-view").hidden) { drawnWidth = width; drawMap(); }
}).observe(mapCanvas.parentElement);
if (location.hash === "#map") showMap(true);
