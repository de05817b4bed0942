// The chat page: plain JavaScript, no build step, no CDN. Every text from the server is put
// into the page with textContent, never as HTML, so an abstract or answer holding markup
// shows as text; only its LaTeX formulas are rendered, by KaTeX (vendored in /static/katex).
"use strict";

const $ = (id) => document.getElementById(id);
// chat.scope: the papers the open conversation's questions are asked of ({paper_id, name}; empty: every paper)
const state = { history: [], controller: null, papers: null, chat: null, paper: null };

// -- API ---------------------------------------------------------------------------------

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = sessionStorage.getItem("rag-api-key");
  if (key) h.Authorization = `Bearer ${key}`;
  return h;
}

function askForKey() {
  return new Promise((resolve) => {
    const dialog = $("key-dialog");
    $("key-form").onsubmit = () => {
      sessionStorage.setItem("rag-api-key", $("api-key").value.trim());
      resolve();
    };
    dialog.showModal();
  });
}

class ApiError extends Error {}

async function request(path, options = {}) {
  for (let attempt = 0; attempt < 3; attempt++) {
    let response;
    try {
      response = await fetch(path, { ...options, headers: headers() });
    } catch (err) {
      if (err.name === "AbortError") throw err;
      throw new ApiError("The service cannot be reached. Is it running?");
    }
    if (response.status === 401) { await askForKey(); continue; }
    if (!response.ok) {
      let message = `The service answered HTTP ${response.status}.`;
      try {
        const body = await response.json();
        if (body.error) message = `${body.error.message} (${response.status} ${body.error.code})`;
      } catch (_) { /* not JSON: keep the status line */ }
      throw new ApiError(message);
    }
    return response;
  }
  throw new ApiError("The API key was not accepted.");
}

// Server-sent events from a fetch body: yields {event, data} as they arrive.
async function* events(response, signal) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buffer.indexOf("\n\n")) >= 0) {
      const block = buffer.slice(0, cut);
      buffer = buffer.slice(cut + 2);
      let event = "message", data = "";
      for (const line of block.split("\n")) {
        if (line.startsWith("event: ")) event = line.slice(7);
        else if (line.startsWith("data: ")) data += line.slice(6);
      }
      if (signal.aborted) return;
      yield { event, data: JSON.parse(data) };
    }
  }
}

// -- rendering ---------------------------------------------------------------------------

// LaTeX as abstracts write it: $$...$$ and \[...\] display, \(...\) and $...$ inline (a $
// formula starts and ends next to a non-space, and a $ before a digit is a price, not math).
const MATH = /\$\$([\s\S]+?)\$\$|\\\[([\s\S]+?)\\\]|\\\(([\s\S]+?)\\\)|\$(?=\S)((?:\\\$|[^$])+?)(?<=\S)\$(?!\d)/g;
const KATEX = { throwOnError: true, strict: "ignore", maxSize: 20, maxExpand: 1000 };  // trust stays off: no links or HTML

// `text` as nodes: text nodes, and a rendered span for each formula KaTeX parses; a formula
// it cannot parse (or KaTeX missing) stays as its source text, so nothing breaks the page.
function withMath(text) {
  const nodes = [];
  let last = 0;
  for (const m of text.matchAll(MATH)) {
    const display = m[1] !== undefined || m[2] !== undefined;
    const span = document.createElement("span");
    try {
      window.katex.render(m[1] ?? m[2] ?? m[3] ?? m[4], span, { ...KATEX, displayMode: display });
    } catch {
      continue;
    }
    span.className = display ? "math display" : "math";
    nodes.push(document.createTextNode(text.slice(last, m.index)), span);
    last = m.index + m[0].length;
  }
  nodes.push(document.createTextNode(text.slice(last)));
  return nodes;
}

function addTurn(role, text) {
  $("hint")?.remove();
  const turn = $("turn-template").content.firstElementChild.cloneNode(true);
  turn.classList.add(role);
  turn.querySelector(".who").textContent = role === "user" ? "You" : "Answer";
  turn.querySelector(".body").textContent = text;
  $("conversation").append(turn);
  turn.scrollIntoView({ block: "end" });
  return turn;
}

// An answer's inline text as nodes: each [n] a link to citation n, **bold** runs, formulas.
function inline(text, byN) {
  const nodes = [];
  let last = 0;
  for (const match of text.matchAll(/\[(\d+)\]|\*\*([^*\n]+)\*\*/g)) {
    nodes.push(...withMath(text.slice(last, match.index)));
    last = match.index + match[0].length;
    if (match[2] !== undefined) {
      const strong = document.createElement("strong");
      strong.append(...withMath(match[2]));
      nodes.push(strong);
      continue;
    }
    const n = Number(match[1]);
    const link = document.createElement("a");
    link.href = "#";
    link.className = "cite";
    link.textContent = `[${n}]`;
    link.dataset.n = n;
    const citation = byN.get(n);
    if (citation) {
      link.title = citation.name;
      link.setAttribute("aria-label", `Source ${n}: ${citation.name}`);
      link.addEventListener("click", (e) => { e.preventDefault(); showPaper(citation, citation.snippet); });
    }
    nodes.push(link);
  }
  nodes.push(...withMath(text.slice(last)));
  return nodes;
}

// The blocks an answer is written in: prose, "- " list items, and "| a | b |" table rows (a
// comparison, a list of papers, a table of figures). Written by hand, as the page builds every
// node itself (no HTML from the server ever reaches innerHTML) and only these three are used.
function blocks(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const kind = /^\s*\|.*\|\s*$/.test(line) ? "table" : /^\s*[-*] /.test(line) ? "list" : "text";
    const previous = out[out.length - 1];
    if (previous && previous.kind === kind) previous.lines.push(line);
    else out.push({ kind, lines: [line] });
  }
  return out;
}

function cells(row) {
  return row.trim().replace(/^\||\|$/g, "").split("|").map((c) => c.trim());
}

// The answer text, with its lists and tables laid out and each [n] a link to citation n.
function renderAnswer(turn, text, citations) {
  const body = turn.querySelector(".body");
  body.replaceChildren();
  const byN = new Map((citations || []).map((c) => [c.n, c]));
  for (const block of blocks(text)) {
    if (block.kind === "list") {
      const list = document.createElement("ul");
      for (const line of block.lines) {
        const item = document.createElement("li");
        item.append(...inline(line.replace(/^\s*[-*] /, ""), byN));
        list.append(item);
      }
      body.append(list);
    } else if (block.kind === "table") {
      const rows = block.lines.filter((line) => !/^\s*\|[\s:|-]+\|\s*$/.test(line));  // not the |---| rule
      const table = document.createElement("table");
      rows.forEach((row, i) => {
        const tr = document.createElement("tr");
        for (const cell of cells(row)) {
          const td = document.createElement(i === 0 ? "th" : "td");
          td.append(...inline(cell, byN));
          tr.append(td);
        }
        (i === 0 ? table.createTHead() : (table.tBodies[0] || table.createTBody())).append(tr);
      });
      body.append(table);
    } else {
      const prose = block.lines.join("\n").replace(/^\n+|\n+$/g, "");
      if (prose) body.append(...inline(prose, byN));
    }
  }
}

function renderSources(turn, citations) {
  const list = turn.querySelector(".sources");
  list.replaceChildren();
  for (const c of citations) {
    const item = document.createElement("li");
    item.value = c.n;
    const link = document.createElement("a");
    link.href = "#";
    link.textContent = c.name;
    link.addEventListener("click", (e) => { e.preventDefault(); showPaper(c, c.snippet); });
    item.append(link);
    list.append(item);
  }
}

function showPaper(paper, snippet) {
  const panel = $("source");
  $("source-name").textContent = paper.name;
  const authors = paper.authors && paper.authors.length ? `${paper.authors.join(", ")} · ` : "";
  $("source-meta").textContent = `${authors}paper ${paper.paper_id}`;
  const text = $("source-text");
  text.replaceChildren();
  const at = snippet ? paper.text.indexOf(snippet) : -1;
  if (at >= 0) {
    const mark = document.createElement("mark");
    mark.append(...withMath(snippet));
    text.append(...withMath(paper.text.slice(0, at)), mark, ...withMath(paper.text.slice(at + snippet.length)));
  } else {
    text.append(...withMath(paper.text));
  }
  const code = $("source-code");
  const url = paper.code_url;
  code.hidden = !url;
  if (url) { code.querySelector("a").href = url; code.querySelector("a").textContent = url; }
  state.paper = paper;
  panel.hidden = false;
  panel.focus();
  text.querySelector("mark")?.scrollIntoView({ block: "center" });
  showSimilar(paper.paper_id);
}

// A paper by its id (the map and the similar papers know only ids).
async function openPaper(paperId) {
  try {
    const paper = await (await request(`/papers/${encodeURIComponent(paperId)}`)).json();
    showPaper(paper, null);
  } catch (err) {
    addTurn("assistant", err.message).classList.add("error");
  }
}

// The papers nearest to the one shown, each with the pair of sentences that ties them.
async function showSimilar(paperId) {
  const list = $("similar-list"), status = $("similar-status");
  list.replaceChildren();
  status.textContent = "Finding similar papers…";
  let found;
  try {
    found = (await (await request(`/papers/${encodeURIComponent(paperId)}/similar?k=5`)).json()).similar;
  } catch (err) {
    if (state.paper?.paper_id === paperId) status.textContent = err.message;
    return;
  }
  if (state.paper?.paper_id !== paperId) return;  // another paper was opened meanwhile
  status.textContent = found.length ? "" : "No similar paper.";
  for (const s of found) {
    const item = document.createElement("li");
    const open = document.createElement("button");
    open.type = "button";
    open.className = "similar-open";
    open.textContent = s.name;
    open.title = `similarity ${s.score.toFixed(2)}`;
    open.addEventListener("click", () => openPaper(s.paper_id));
    const pair = document.createElement("p");
    pair.className = "pair";
    const theirs = document.createElement("q"), ours = document.createElement("q");
    theirs.append(...withMath(s.pair.similar));
    ours.append(...withMath(s.pair.asked));
    pair.append(theirs, document.createTextNode(" echoes this paper's "), ours);
    item.append(open, pair);
    list.append(item);
  }
}

// "Ask about this paper": back to the chat with the paper added to the scope, ready for a question.
function askAbout(paperId, name) {
  if (!$("map-view").hidden) showMap(false);
  const scope = state.chat.scope;
  if (!scope.some((p) => p.paper_id === paperId)) scope.push({ paper_id: paperId, name });
  renderScope();
  saveChat();
  $("question").focus();
}

// The scope as chips above the question box, each with a × that removes its paper; removing
// the last one clears the scope (questions are then asked of every paper). The scope belongs to
// the conversation: kept with it, back when it is reopened, none in a new one.
const PLACEHOLDER = $("question").placeholder;
function renderScope() {
  const list = $("scope-list");
  list.replaceChildren();
  const scope = state.chat.scope;
  for (const paper of scope) {
    const chip = document.createElement("li");
    chip.className = "chip";
    const name = document.createElement("span");
    name.textContent = paper.name;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.title = `Ask about ${paper.name} no more`;
    remove.setAttribute("aria-label", `Remove ${paper.name} from the scope`);
    remove.addEventListener("click", () => unscope(paper.paper_id));
    chip.append(name, remove);
    list.append(chip);
  }
  $("scope").hidden = !scope.length;
  $("question").placeholder = scope.length ? "Ask about these papers only (Enter sends)" : PLACEHOLDER;
}

function unscope(paperId) {
  const at = state.chat.scope.findIndex((p) => p.paper_id === paperId);
  if (at >= 0) state.chat.scope.splice(at, 1);
  renderScope();
  saveChat();
  const left = $("scope-list").querySelectorAll("button");  // focus stays on the chips, then the question
  (left[Math.min(at, left.length - 1)] || $("question")).focus();
}

// A note above an answer the abstracts do not fully cover (low) or do not cover at all (none).
function showConfidence(turn, confidence, missing) {
  turn.dataset.confidence = confidence;
  const note = turn.querySelector(".coverage");
  note.hidden = confidence === "high";
  if (confidence === "low") {
    note.textContent = "Partly covered: the closest papers, not an exact answer.";
    note.title = `No cited abstract mentions “${missing}”`;
  } else if (confidence === "none") {
    note.textContent = "Not covered by these abstracts.";
  }
}

// What a person does with an answer: rate it (a comment may follow), copy it, ask what it suggests.
function finishAnswer(turn, data) {
  renderAnswer(turn, data.answer, data.citations);
  renderSources(turn, data.citations);
  turn.classList.toggle("abstained", data.abstained);
  showConfidence(turn, data.confidence, data.missing);
  const actions = turn.querySelector(".actions");
  actions.hidden = false;
  const status = actions.querySelector(".status");
  const comment = turn.querySelector(".comment");
  let rating = data.rating || null;
  const pressed = () => {
    for (const b of actions.querySelectorAll(".rate")) b.setAttribute("aria-pressed", String(b.dataset.rating === rating));
  };
  pressed();
  // One rating request at a time, in the order given: the store keeps the last one it receives, so
  // a rating sent before its comment must not land after it (nor its "Thanks" show last).
  let sending = Promise.resolve();
  const post = async (chosen, text) => {
    try {
      await request("/feedback", {
        method: "POST",
        body: JSON.stringify({ answer_id: data.answer_id, rating: chosen, comment: text || null }),
      });
      data.rating = chosen;
      saveChat();
      status.textContent = text ? "Thanks: your comment was recorded." : "Thanks: recorded.";
    } catch (err) {
      status.textContent = err.message;
    }
  };
  const send = (text) => {
    const chosen = rating;
    sending = sending.then(() => post(chosen, text));
    return sending;
  };
  for (const button of actions.querySelectorAll(".rate")) {
    button.addEventListener("click", () => {
      rating = button.dataset.rating;
      pressed();
      send("");
      comment.hidden = false;
      comment.querySelector("textarea").focus();
    });
  }
  comment.addEventListener("submit", (e) => {
    e.preventDefault();
    send(comment.querySelector("textarea").value.trim());
    comment.hidden = true;
  });
  actions.querySelector(".copy").addEventListener("click", async () => {
    try {
      await navigator.clipboard.writeText(asMarkdown(data));
      status.textContent = "Copied as Markdown.";
    } catch (err) {
      status.textContent = `Cannot copy here: ${err.message}`;
    }
  });
  const suggestions = turn.querySelector(".suggestions");
  suggestions.hidden = !(data.suggestions || []).length;
  for (const question of data.suggestions || []) {
    const button = document.createElement("button");
    button.type = "button";
    button.className = "suggestion";
    button.textContent = question;
    button.addEventListener("click", () => { if (!state.controller) ask(question); });
    suggestions.append(button);
  }
}

// The answer with its numbered sources, as Markdown.
function asMarkdown(data) {
  const sources = (data.citations || []).map((c) => `${c.n}. ${c.name} (paper ${c.paper_id})`);
  return sources.length ? `${data.answer}\n\nSources:\n\n${sources.join("\n")}\n` : `${data.answer}\n`;
}

// -- kept conversations (localStorage only) ----------------------------------------------

const CHATS = "rag-chats";

function chats() {
  try { return JSON.parse(localStorage.getItem(CHATS)) || []; } catch { return []; }
}

function storeChats(list) {
  try { localStorage.setItem(CHATS, JSON.stringify(list)); } catch { /* full or disabled: not kept */ }
}

function saveChat() {
  if (!state.chat || !state.chat.turns.length) return;
  state.chat.updated = Date.now();
  storeChats([state.chat, ...chats().filter((c) => c.id !== state.chat.id)]);
  localStorage.setItem("rag-current-chat", state.chat.id);
}

function freshChat() {
  return { id: crypto.randomUUID?.() || String(Date.now()), title: "", updated: Date.now(), turns: [], scope: [] };
}

function newChat() {
  state.chat = freshChat();
  state.history = [];
  $("conversation").replaceChildren();
  renderScope();
  localStorage.removeItem("rag-current-chat");
}

// A question asked within chosen papers says so above it.
function addQuestion(question, scope) {
  const turn = addTurn("user", question);
  if (scope?.length) turn.querySelector(".who").textContent = `You, within ${scope.join(", ")}`;
}

function openChat(chat) {
  state.controller?.abort();
  state.chat = { ...chat, scope: [...(chat.scope || [])] };  // conversations kept before scopes have none
  state.history = [];
  $("conversation").replaceChildren();
  renderScope();
  for (const { question, data, scope } of chat.turns) {
    addQuestion(question, scope);
    finishAnswer(addTurn("assistant", ""), data);
    state.history.push({ role: "user", content: question }, { role: "assistant", content: data.answer });
  }
  state.history = state.history.slice(-20);
  localStorage.setItem("rag-current-chat", chat.id);
}

function renderChats() {
  const list = $("chat-list");
  list.replaceChildren();
  const kept = chats();
  if (!kept.length) {
    const empty = document.createElement("li");
    empty.className = "meta";
    empty.textContent = "No conversation kept yet.";
    list.append(empty);
  }
  for (const chat of kept) {
    const item = document.createElement("li");
    const open = document.createElement("button");
    open.type = "button";
    open.className = "open-chat";
    open.textContent = chat.title || chat.turns[0]?.question || "Untitled";
    open.addEventListener("click", () => { openChat(chat); $("chats").hidden = true; $("question").focus(); });
    const rename = document.createElement("button");
    rename.type = "button";
    rename.textContent = "Rename";
    rename.setAttribute("aria-label", `Rename ${open.textContent}`);
    rename.addEventListener("click", () => {
      const title = prompt("Name this conversation", open.textContent);
      if (title === null || !title.trim()) return;
      chat.title = title.trim();
      storeChats(chats().map((c) => (c.id === chat.id ? { ...c, title: chat.title } : c)));
      if (state.chat?.id === chat.id) state.chat.title = chat.title;
      renderChats();
    });
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "Delete";
    remove.setAttribute("aria-label", `Delete ${open.textContent}`);
    remove.addEventListener("click", () => {
      storeChats(chats().filter((c) => c.id !== chat.id));
      if (state.chat?.id === chat.id) newChat();
      renderChats();
    });
    item.append(open, rename, remove);
    list.append(item);
  }
}

// -- asking ------------------------------------------------------------------------------

function busy(on) {
  $("send").disabled = on;
  $("stop").hidden = !on;
}

async function ask(question) {
  const scope = state.chat.scope.map((p) => p.name);
  const within = scope.length ? { paper_ids: state.chat.scope.map((p) => p.paper_id) } : {};
  addQuestion(question, scope);
  const turn = addTurn("assistant", "");
  turn.classList.add("streaming");
  const controller = new AbortController();
  state.controller = controller;
  busy(true);
  let text = "";
  try {
    const response = await request("/ask", {
      method: "POST",
      body: JSON.stringify({ question, history: state.history, stream: true, ...within }),
      signal: controller.signal,
    });
    for await (const { event, data } of events(response, controller.signal)) {
      if (event === "token") {
        text += data.text;
        renderAnswer(turn, text, []);
      } else if (event === "done") {
        finishAnswer(turn, data);
        state.history.push({ role: "user", content: question }, { role: "assistant", content: data.answer });
        state.history = state.history.slice(-20);
        state.chat.turns.push({ question, data, scope });
        saveChat();
      } else if (event === "error") {
        throw new ApiError(`${data.message} (${data.code})`);
      }
    }
  } catch (err) {
    if (err.name === "AbortError") {
      turn.querySelector(".body").append(document.createTextNode(" (stopped)"));
    } else {
      turn.classList.add("error");
      turn.querySelector(".body").textContent = err instanceof ApiError ? err.message : `Something went wrong: ${err.message}`;
    }
  } finally {
    turn.classList.remove("streaming");
    state.controller = null;
    busy(false);
    turn.scrollIntoView({ block: "end" });
  }
}

// -- papers ------------------------------------------------------------------------------

async function loadPapers() {
  if (!state.papers) {
    const response = await request("/papers");
    state.papers = (await response.json()).papers;
  }
  return state.papers;
}

function renderPapers(filter) {
  const words = filter.toLowerCase().split(/\s+/).filter(Boolean);
  const searched = (p) => [p.name, ...(p.authors || []), p.text].join(" ").toLowerCase();
  const shown = state.papers.filter((p) => words.every((w) => searched(p).includes(w)));
  const list = $("paper-list");
  list.replaceChildren();
  for (const p of shown) {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = p.name;
    button.addEventListener("click", () => showPaper(p, null));
    item.append(button);
    list.append(item);
  }
  $("paper-count").textContent = `(${shown.length} of ${state.papers.length})`;
}

// -- wiring ------------------------------------------------------------------------------

$("ask-form").addEventListener("submit", (e) => {
  e.preventDefault();
  const question = $("question").value.trim();
  if (!question || state.controller) return;
  $("question").value = "";
  ask(question);
});
$("question").addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey && !e.isComposing) {
    e.preventDefault();
    $("ask-form").requestSubmit();
  }
});
$("stop").addEventListener("click", () => state.controller?.abort());
$("new-chat").addEventListener("click", () => {
  state.controller?.abort();
  newChat();
  $("source").hidden = true;
  $("question").focus();
});
$("show-chats").addEventListener("click", () => {
  const panel = $("chats");
  renderChats();
  panel.hidden = !panel.hidden;
  $("show-chats").setAttribute("aria-expanded", String(!panel.hidden));
  if (!panel.hidden) panel.focus();
});
$("show-papers").addEventListener("click", async () => {
  const panel = $("papers");
  try {
    await loadPapers();
  } catch (err) {
    addTurn("assistant", err.message).classList.add("error");
    return;
  }
  renderPapers($("paper-filter").value);
  panel.hidden = !panel.hidden;
  $("show-papers").setAttribute("aria-expanded", String(!panel.hidden));
  if (!panel.hidden) $("paper-filter").focus();
});
$("paper-filter").addEventListener("input", (e) => renderPapers(e.target.value));
$("ask-about").addEventListener("click", () => { if (state.paper) askAbout(state.paper.paper_id, state.paper.name); });
for (const button of document.querySelectorAll("[data-close]")) {
  button.addEventListener("click", () => { $(button.dataset.close).hidden = true; });
}
document.addEventListener("keydown", (e) => {
  if (e.key === "Escape") { $("source").hidden = true; $("papers").hidden = true; $("chats").hidden = true; }
});
// /#paper=<id> opens that paper: the links the service sends chat UIs with its citations.
async function openLinkedPaper() {
  const id = new URLSearchParams(location.hash.slice(1)).get("paper");
  if (!id) return;
  try {
    const paper = (await loadPapers()).find((p) => p.paper_id === id);
    if (paper) showPaper(paper, null);
  } catch (err) {
    addTurn("assistant", err.message).classList.add("error");
  }
}
window.addEventListener("hashchange", openLinkedPaper);
openLinkedPaper();
// The conversation open before a reload comes back.
const current = chats().find((c) => c.id === localStorage.getItem("rag-current-chat"));
if (current) openChat(current); else newChat();
$("question").focus();
