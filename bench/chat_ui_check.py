"""End-to-end check with a real Open WebUI: does the service work in a chat UI in ordinary use?

    .venv/bin/python -m bench.chat_ui_check [--owui-venv DIR] [--turns N] [--keep]

1. Creates the Open WebUI venv when missing (default ~/.cache/icml-rag/open-webui-venv:
   torch==2.13.0 first, this machine's CPU build, then open-webui==0.12.4); an existing venv
   with an `open-webui` command is used as is.
2. Starts `rag serve` from the checkout (its seeds/ and index/) on a free loopback port, its
   JSON log lines captured to a file, and Open WebUI offline (no auth, no Ollama, no web
   search, a fresh temporary DATA_DIR) pointed at http://127.0.0.1:PORT/v1.
3. Drives Open WebUI's own web page with Playwright and the system Chromium (/usr/bin/chromium;
   every request not to 127.0.0.1 is blocked) like a user: a new chat with model icml-rag, a
   question, a follow-up, then more short questions until the chat has N user turns (23 by
   default, so the 22nd and a later one are covered), each typed and sent in the page.
4. Checks through Open WebUI's REST API (/api/v1/chats/{id}, /api/v1/chats/{id}/tags), the
   page, the socket events the page receives and the service's log; prints one PASS/FAIL line
   per check with what it saw, and exits 0 when all pass, 1 otherwise.

Every process it starts (the service, Open WebUI, the browser) is stopped in all cases. Logs,
the Open WebUI data folder and screenshots are in a temporary folder, removed after a run that
passes unless --keep is given (kept and printed when a check fails).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
TORCH = "torch==2.13.0"
OPEN_WEBUI = "open-webui==0.12.4"
MODEL = "icml-rag"

FIRST = "What speedup does Jacobi Forcing report?"
FOLLOW_UP = "What does it propose?"
MORE = [
    "What is MedMosaic?",
    "Which paper studies rotary embeddings for vision transformers?",
    "What does Spiral RoPE change?",
]
CITATION = re.compile(r"\[\d+\]")


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


# ---------------------------------------------------------------- processes and HTTP


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method: str, url: str, token: str | None = None, body=None, timeout: float = 30) -> tuple[int, object]:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            raw = r.read()
            status = r.status
    except urllib.error.HTTPError as e:
        raw, status = e.read(), e.code
    try:
        return status, json.loads(raw) if raw else None
    except ValueError:
        return status, raw.decode("utf-8", "replace")


# Loopback only, whatever proxy the environment names.
urllib.request.install_opener(urllib.request.build_opener(urllib.request.ProxyHandler({})))


class Proc:
    """A child process in its own process group, output to a file; stop() ends the group."""

    def __init__(self, name: str, cmd: list[str], log_path: Path, env: dict, cwd: Path):
        self.name, self.log_path = name, log_path
        self.out = open(log_path, "wb")  # noqa: SIM115 -- open while the process runs; stop() closes it
        self.p = subprocess.Popen(
            cmd, stdout=self.out, stderr=subprocess.STDOUT, env=env, cwd=cwd, start_new_session=True
        )
        log(f"started {name} (pid {self.p.pid}), log {log_path}")

    def alive(self) -> bool:
        return self.p.poll() is None

    def stop(self) -> None:
        if self.alive():
            for sig, wait in ((signal.SIGTERM, 20), (signal.SIGKILL, 10)):
                try:
                    os.killpg(self.p.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    self.p.wait(wait)
                    break
                except subprocess.TimeoutExpired:
                    continue
        self.out.close()
        log(f"stopped {self.name} (exit {self.p.returncode})")


def wait_http(url: str, proc: Proc, timeout: float, what: str) -> None:
    t0 = time.time()
    while time.time() - t0 < timeout:
        if not proc.alive():
            raise RuntimeError(f"{what} exited with {proc.p.returncode}; see {proc.log_path}")
        try:
            status, _ = http("GET", url, timeout=5)
            if status == 200:
                log(f"{what} ready after {time.time() - t0:.0f} s")
                return
        except OSError:
            pass
        time.sleep(1)
    raise RuntimeError(f"{what} not ready after {timeout:.0f} s ({url}); see {proc.log_path}")


def ensure_owui_venv(venv: Path, pip_log: Path) -> Path:
    exe = venv / "bin" / "open-webui"
    if exe.exists():
        log(f"Open WebUI venv: {venv} (exists, not installing)")
        return exe
    log(f"creating the Open WebUI venv in {venv} ({TORCH} first, then {OPEN_WEBUI}; several minutes)")
    if not (venv / "bin" / "python").exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check"]
    with open(pip_log, "ab") as out:
        for requirement in (TORCH, OPEN_WEBUI):
            log(f"pip install {requirement} (output in {pip_log})")
            if subprocess.run(pip + [requirement], stdout=out, stderr=subprocess.STDOUT).returncode:
                tail = pip_log.read_text("utf-8", "replace").splitlines()[-15:]
                raise RuntimeError(f"pip install {requirement} failed:\n" + "\n".join(tail))
    if not exe.exists():
        raise RuntimeError(f"{exe} missing after installing {OPEN_WEBUI}")
    return exe


def owui_env(data_dir: Path, api_base: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy")}
    env.update(
        {
            "DATA_DIR": str(data_dir),
            "OPENAI_API_BASE_URL": api_base,
            # the service's key when it has one; any text otherwise
            "OPENAI_API_KEY": os.environ.get("RAG_API_KEY") or "unused",
            "ENABLE_OPENAI_API": "True",
            "ENABLE_OLLAMA_API": "False",
            "WEBUI_AUTH": "False",
            "WEBUI_SECRET_KEY": "chat-ui-check",
            "OFFLINE_MODE": "true",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "ENABLE_PERSISTENT_CONFIG": "False",
            "ENABLE_WEB_SEARCH": "False",
            "ENABLE_EVALUATION_ARENA_MODELS": "False",
            "RAG_EMBEDDING_MODEL_AUTO_UPDATE": "False",
            "RAG_RERANKING_MODEL_AUTO_UPDATE": "False",
            "ENABLE_VERSION_UPDATE_CHECK": "False",
            "ENABLE_COMMUNITY_SHARING": "False",
            "ANONYMIZED_TELEMETRY": "False",
            "SCARF_NO_ANALYTICS": "true",
            "DO_NOT_TRACK": "true",
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    return env


# ---------------------------------------------------------------- the service's log


def service_requests(log_path: Path) -> list[dict]:
    """The service's one-JSON-line-per-request log entries (method, route, status, ms)."""
    out = []
    for line in log_path.read_text("utf-8", "replace").splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict) and "route" in entry and "status" in entry:
            out.append(entry)
    return out


# ---------------------------------------------------------------- the web page


class UI:
    def __init__(self, pw, base: str, shots: Path):
        self.base, self.shots = base, shots
        self.blocked: list[str] = []
        self.deltas: dict[str, int] = {}  # message id -> streamed text deltas the page received
        self.browser = pw.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        self.ctx = self.browser.new_context(viewport={"width": 1400, "height": 1000})
        self.ctx.route("**/*", self._guard)
        self.page = self.ctx.new_page()
        self.page.on("websocket", self._socket)

    def _guard(self, route):
        url = route.request.url
        if url.startswith(("http://127.0.0.1", "ws://127.0.0.1", "data:", "blob:")):
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def _socket(self, ws):
        def frame(payload):
            if not isinstance(payload, str) or "output_text.delta" not in payload:
                return
            try:
                event = json.loads(payload[payload.index("[") :])[1]
            except (ValueError, IndexError, TypeError):
                return
            data = (event.get("data") or {}).get("data") or {}
            if isinstance(data, dict) and data.get("type") == "response.output_text.delta" and data.get("delta"):
                mid = event.get("message_id") or "?"
                self.deltas[mid] = self.deltas.get(mid, 0) + 1

        ws.on("framereceived", frame)

    def shot(self, name: str) -> None:
        with contextlib.suppress(Exception):  # a screenshot is evidence, never a reason to fail
            self.page.screenshot(path=str(self.shots / f"{name}.png"))

    def open_new_chat(self) -> None:
        self.page.goto(f"{self.base}/?model={MODEL}", wait_until="load")
        self.page.wait_for_selector("#chat-input", timeout=90_000)
        self.page.wait_for_timeout(1500)
        for label in ("Okay, Let's Go!",):  # the "what's new" dialog on a first visit
            button = self.page.get_by_text(label)
            if button.count():
                button.first.click()
                self.page.wait_for_timeout(500)

    def token(self) -> str:
        return self.page.evaluate("localStorage.token") or ""

    def send(self, text: str) -> None:
        box = self.page.locator("#chat-input")
        box.click()
        box.fill(text)
        self.page.wait_for_timeout(200)
        self.page.keyboard.press("Enter")

    def chat_id(self, timeout: float = 30) -> str:
        t0 = time.time()
        while time.time() - t0 < timeout:
            m = re.search(r"/c/([0-9a-f-]{8,})", self.page.url)
            if m:
                return m.group(1)
            self.page.wait_for_timeout(250)
        raise RuntimeError(f"the page did not open a chat (url {self.page.url})")

    def generating(self) -> bool:
        return self.page.locator("button[aria-label='Stop']").count() > 0

    def sources_button(self, message_id: str) -> str:
        b = self.page.locator(f"#message-{message_id} button[aria-label^='Toggle'][aria-label*='source']")
        return b.first.inner_text().strip() if b.count() else ""

    def source_names(self, message_id: str) -> list[str]:
        b = self.page.locator(f"#message-{message_id} button[aria-label^='Toggle'][aria-label*='source']")
        if not b.count():
            return []
        b.first.click()
        self.page.wait_for_timeout(500)
        names = self.page.locator(f"button[id^='source-{message_id}-']").all_inner_texts()
        return [" ".join(n.split()) for n in names]

    def follow_ups_shown(self, message_id: str, timeout: float) -> list[str]:
        t0 = time.time()
        while time.time() - t0 < timeout:
            items = self.page.evaluate(
                """(mid) => {
                    const root = document.getElementById('message-' + mid);
                    if (!root) return [];
                    const heads = [...root.querySelectorAll('div')].filter(d => d.innerText.trim() === 'Follow up');
                    if (!heads.length) return [];
                    return [...heads[0].parentElement.querySelectorAll('[aria-label]')]
                        .map(e => e.getAttribute('aria-label'));
                }""",
                message_id,
            )
            if items:
                return items
            self.page.wait_for_timeout(500)
        return []

    def inline_chips(self, message_id: str) -> list[str]:
        """The texts of the buttons inside the answer's text: Open WebUI turns each [n] marker
        that matches a source into a chip named after it."""
        return self.page.evaluate(
            """(mid) => {
                const root = document.getElementById('message-' + mid);
                const body = root && root.querySelector('#response-content-container');
                if (!body) return [];
                return [...body.querySelectorAll('button')]
                    .filter(b => !b.id.startsWith('source-')
                        && !(b.getAttribute('aria-label') || '').startsWith('Toggle'))
                    .map(b => b.innerText.trim()).filter(t => t);
            }""",
            message_id,
        )

    def close(self) -> None:
        try:
            self.browser.close()
        finally:
            log("stopped the browser")


# ---------------------------------------------------------------- Open WebUI's stored chat


def thread(chat: dict) -> list[dict]:
    """The chat's messages from the first to the current one."""
    history = (chat.get("chat") or {}).get("history") or {}
    messages = history.get("messages") or {}
    out, mid = [], history.get("currentId")
    while mid and mid in messages:
        out.append(messages[mid])
        mid = messages[mid].get("parentId")
    return out[::-1]


def message_text(m: dict) -> str:
    content = m.get("content")
    if isinstance(content, str) and content:
        return content
    parts = []
    for item in m.get("output") or []:
        for c in item.get("content") or []:
            if isinstance(c, dict) and c.get("text"):
                parts.append(c["text"])
    return "".join(parts)


class OWUI:
    def __init__(self, base: str, token: str):
        self.base, self.token = base, token

    def chat(self, chat_id: str) -> dict:
        status, body = http("GET", f"{self.base}/api/v1/chats/{chat_id}", self.token)
        if status != 200 or not isinstance(body, dict):
            raise RuntimeError(f"GET /api/v1/chats/{chat_id} -> {status} {str(body)[:200]}")
        return body

    def tags(self, chat_id: str) -> list[str]:
        status, body = http("GET", f"{self.base}/api/v1/chats/{chat_id}/tags", self.token)
        return [t.get("name", t.get("id")) for t in body] if status == 200 and isinstance(body, list) else []


def wait_turn(ui: UI, owui: OWUI, chat_id: str, turn: int, service_log: Path, timeout: float = 180) -> dict:
    """Until the stored chat has `turn` user messages, the last one answered (done), the page has
    stopped generating and the service has seen no request for 2 s (the background requests
    after an answer: title, tags, follow-ups)."""
    t0 = time.time()
    last_size, last_change = -1, time.time()
    while time.time() - t0 < timeout:
        ui.page.wait_for_timeout(500)
        size = service_log.stat().st_size
        if size != last_size:
            last_size, last_change = size, time.time()
        msgs = thread(owui.chat(chat_id))
        users = [m for m in msgs if m.get("role") == "user"]
        last = msgs[-1] if msgs else {}
        answered = len(users) >= turn and last.get("role") == "assistant" and (last.get("done") or last.get("error"))
        if answered and not ui.generating() and time.time() - last_change >= 2.0:
            return last
    raise RuntimeError(f"turn {turn} not answered within {timeout:.0f} s")


# ---------------------------------------------------------------- the check


class Report:
    def __init__(self):
        self.results: list[tuple[str, bool, str]] = []

    def check(self, name: str, ok: bool, observed) -> None:
        self.results.append((name, bool(ok), str(observed)))
        print(f"{'PASS' if ok else 'FAIL'}  {name}: {observed}", flush=True)

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(ok for _, ok, _ in self.results)


def short(text: str, n: int = 110) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def drive_and_check(args, work: Path, owui_port: int, service_log: Path, report: Report) -> None:
    from playwright.sync_api import sync_playwright

    base = f"http://127.0.0.1:{owui_port}"
    shots = work / "shots"
    shots.mkdir()
    with sync_playwright() as pw:
        ui = UI(pw, base, shots)
        try:
            ui.open_new_chat()
            owui = OWUI(base, ui.token())
            status, models = http("GET", f"{base}/api/models", owui.token)
            ids = [m.get("id") for m in (models or {}).get("data", [])] if isinstance(models, dict) else []
            if MODEL not in ids:
                raise RuntimeError(f"Open WebUI lists no model {MODEL} (GET /api/models -> {status} {ids})")
            log(f"Open WebUI lists the models {ids}")

            questions = [FIRST, FOLLOW_UP] + [MORE[i % len(MORE)] for i in range(max(0, args.turns - 2))]
            answers: list[dict] = []
            first_ui = {}
            chat_id = ""
            for turn, question in enumerate(questions, start=1):
                t = time.time()
                ui.send(question)
                if turn == 1:
                    chat_id = ui.chat_id()
                    log(f"chat {base}/c/{chat_id}")
                answer = wait_turn(ui, owui, chat_id, turn, service_log)
                answers.append(answer)
                shown = (
                    "ERROR " + short(str(answer.get("error")))
                    if answer.get("error")
                    else short(message_text(answer), 90)
                )
                log(f"turn {turn:2d} {time.time() - t:5.1f} s  {question!r} -> {shown}")
                if turn == 1:
                    # what the page shows under the first answer while it is the last one
                    mid = answer["id"]
                    first_ui["follow_ups"] = ui.follow_ups_shown(mid, timeout=15)
                    first_ui["sources_button"] = ui.sources_button(mid)
                    first_ui["source_names"] = ui.source_names(mid)
                    first_ui["inline_chips"] = ui.inline_chips(mid)
                    ui.shot("01-first-answer")
                if turn == 2:
                    ui.shot("02-follow-up")
            last_id = answers[-1]["id"]
            last_ui_follow_ups = ui.follow_ups_shown(last_id, timeout=10)
            ui.shot("03-last-turn")

            chat = owui.chat(chat_id)
            msgs = thread(chat)
            tags = owui.tags(chat_id)
            blocked = list(ui.blocked)
            deltas = dict(ui.deltas)
        finally:
            ui.close()

    # ------------------------------------------------------------ checks
    users = [m for m in msgs if m.get("role") == "user"]
    assistants = [m for m in msgs if m.get("role") == "assistant"]
    answers = assistants  # as stored at the end (follow-ups and sources arrive after the answer)
    expected_title = " ".join(FIRST.rstrip("?.!").split()[:8])
    title = chat.get("title", "")
    report.check(
        "title generated by the service",
        title.strip() not in ("", "New Chat", FIRST),
        f"{title!r} (the service's rule gives {expected_title!r}; Open WebUI's fallback would be {FIRST!r})",
    )

    models = (chat.get("chat") or {}).get("models")
    report.check(
        "the chat uses the service's model",
        models == [MODEL] and all(a.get("model") == MODEL for a in assistants),
        f"chat models {models}; answers by {sorted({a.get('model') for a in assistants})}",
    )

    report.check("tags set on the chat", bool(tags), f"GET /api/v1/chats/{{id}}/tags -> {tags}")

    stored_fu = answers[0].get("followUps") or []
    later_fu = sum(1 for a in assistants if a.get("followUps"))
    report.check(
        "follow-up suggestions stored and shown",
        bool(stored_fu) and bool(first_ui.get("follow_ups")),
        f"first answer: stored {stored_fu}, shown under it {first_ui.get('follow_ups')}; "
        f"{later_fu}/{len(assistants)} answers have follow-ups; shown under the last: {len(last_ui_follow_ups)}",
    )

    streamed = [deltas.get(a["id"], 0) for a in assistants]
    first_text = message_text(answers[0])
    report.check(
        "answers stream into the page",
        all(n >= 2 for n in streamed),
        f"text deltas per answer over the page's socket: first {streamed[0] if streamed else 0}, "
        f"min {min(streamed) if streamed else 0}, max {max(streamed) if streamed else 0} "
        f"({len(streamed)} answers)",
    )

    with_markers = sum(1 for a in assistants if CITATION.search(message_text(a)))
    report.check(
        "answers contain citation markers [n]",
        with_markers == len(assistants) and with_markers > 0,
        f"{with_markers}/{len(assistants)} answers; first: {short(first_text, 140)!r}",
    )

    sources = answers[0].get("sources") or answers[0].get("citations") or []
    urls = [((s.get("source") or {}).get("url") or (s.get("metadata") or [{}])[0].get("source")) for s in sources]
    with_sources = sum(1 for a in assistants if a.get("sources") or a.get("citations"))
    report.check(
        "source chips shown (url_citation annotations)",
        bool(sources) and bool(first_ui.get("sources_button")) and with_sources == len(assistants),
        f"first answer: stored sources {urls}; page button {first_ui.get('sources_button')!r} listing "
        f"{first_ui.get('source_names')}, chips in the text {first_ui.get('inline_chips')}; "
        f"{with_sources}/{len(assistants)} answers have sources",
    )

    follow = message_text(answers[1]) if len(answers) > 1 else ""
    report.check("the follow-up is answered in context", "Jacobi" in follow, f"{FOLLOW_UP!r} -> {short(follow, 140)!r}")

    late = [(i + 1, a) for i, a in enumerate(answers) if i + 1 >= 22]
    bad = [(n, a) for n, a in late if a.get("error") or not a.get("done") or not message_text(a).strip()]
    report.check(
        "turn 22 and later answered without an error",
        len(users) >= 22 and late and not bad,
        f"{len(users)} user turns in the chat; turns {[n for n, _ in late]}: "
        + (
            "; ".join(f"turn {n}: error {a.get('error')!r} done={a.get('done')}" for n, a in bad)
            if bad
            else "; ".join(f"turn {n}: {short(message_text(a), 60)!r}" for n, a in late[:2])
        ),
    )
    errors = [(i + 1, a.get("error")) for i, a in enumerate(answers) if a.get("error")]
    if errors:
        report.check("every turn answered without an error", False, errors[:5])

    # every request the service logged but this script's own /health polls (503 while loading)
    from_owui = [e for e in service_requests(service_log) if e.get("route") != "/health"]
    failed = [e for e in from_owui if int(e.get("status", 0)) >= 400]
    by_route: dict[str, int] = {}
    for e in from_owui:
        key = f"{e.get('method')} {e.get('route')} {e.get('status')}"
        by_route[key] = by_route.get(key, 0) + 1
    report.check(
        "no request from Open WebUI got a 4xx/5xx",
        bool(from_owui) and not failed,
        f"{len(from_owui)} requests ({', '.join(f'{k} x{v}' for k, v in sorted(by_route.items()))})"
        + (f"; failed: {failed[:5]}" if failed else ""),
    )

    # Not a check: Open WebUI's page asks Google for the favicon of each url_citation source.
    print(
        f"INFO  requests the browser blocked (not to 127.0.0.1): {len(blocked)}"
        + (f", e.g. {sorted(set(blocked))[:2]}" if blocked else ""),
        flush=True,
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--owui-venv",
        type=Path,
        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "icml-rag" / "open-webui-venv",
        help="Open WebUI's venv, created when missing",
    )
    ap.add_argument("--turns", type=int, default=23, help="user turns in the long chat (at least 22)")
    ap.add_argument("--keep", action="store_true", help="keep the work folder (logs, data, screenshots)")
    args = ap.parse_args()
    if args.turns < 22:
        ap.error("--turns must be at least 22")
    started = time.time()
    rag = REPO / ".venv" / "bin" / "rag"
    if not rag.exists():
        print(f"{rag} missing: run `make serve` or `make test` once first", file=sys.stderr)
        return 1
    if not Path(CHROMIUM).exists():
        print(f"{CHROMIUM} missing (Debian package chromium)", file=sys.stderr)
        return 1

    def terminated(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    signal.signal(signal.SIGTERM, terminated)  # `make` or CI stopping us still stops the children

    report = Report()
    procs: list[Proc] = []
    work = Path(tempfile.mkdtemp(prefix="chat-ui-check-"))
    failure = None
    try:
        exe = ensure_owui_venv(args.owui_venv.expanduser().absolute(), work / "pip.log")
        rag_port, owui_port = free_port(), free_port()
        service_log = work / "service.log"
        env = dict(os.environ, HF_HUB_OFFLINE="1", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost")
        service = Proc(
            "rag serve", [str(rag), "serve", "--host", "127.0.0.1", "--port", str(rag_port)], service_log, env, REPO
        )
        procs.append(service)
        data_dir = work / "open-webui-data"
        data_dir.mkdir()
        owui = Proc(
            "Open WebUI",
            [str(exe), "serve", "--host", "127.0.0.1", "--port", str(owui_port)],
            work / "open-webui.log",
            owui_env(data_dir, f"http://127.0.0.1:{rag_port}/v1"),
            work,
        )
        procs.append(owui)
        wait_http(f"http://127.0.0.1:{rag_port}/health", service, 600, "the service")
        wait_http(f"http://127.0.0.1:{owui_port}/health", owui, 600, "Open WebUI")
        drive_and_check(args, work, owui_port, service_log, report)
    except (Exception, KeyboardInterrupt) as exc:  # the run could not finish: a failed check with the reason
        failure = exc
        report.check("the run completed", False, f"{type(exc).__name__}: {exc}")
    finally:
        for proc in reversed(procs):
            try:
                proc.stop()
            except Exception as exc:
                log(f"stopping {proc.name}: {exc}")
    ok = report.ok
    passed = sum(1 for _, good, _ in report.results if good)
    print(
        f"{'PASS' if ok else 'FAIL'}: {passed}/{len(report.results)} checks passed "
        f"in {time.time() - started:.0f} s total"
    )
    if ok and not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    else:
        print(f"logs, Open WebUI data and screenshots kept in {work}")
    if failure is not None and not isinstance(failure, (RuntimeError, KeyboardInterrupt)):
        import traceback

        traceback.print_exception(failure)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
