"""Shared fixtures: a real index built once per run, a real uvicorn server on loopback."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import httpx
import pytest
from filelock import FileLock
from playwright.sync_api import Page, expect

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "seeds"
sys.path.insert(0, str(ROOT))

from rag.common.settings import Settings  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def model_cache(tmp_path_factory) -> Path:
    """One ONNX export of the English model for the run, shared by its xdist workers and the
    processes they start (RAG_MODEL_CACHE): each new index folder would import torch and export
    it again (about 12 s)."""
    cache = tmp_path_factory.getbasetemp().parent / "models"
    os.environ["RAG_MODEL_CACHE"] = str(cache)
    return cache


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory, worker_id) -> Path:
    """The full corpus indexed once for the run, with the default settings. Under pytest-xdist the
    first worker to need it builds it while the others wait (a build takes both cores for minutes),
    and each worker gets its own copy: its services keep their feedback database beside it."""
    from rag.index.corpus import load_corpus
    from rag.index.stores.faiss import build_index

    def build(directory: Path) -> None:
        build_index(load_corpus(SEEDS), Settings(index_dir=directory, seeds_dir=SEEDS))

    directory = tmp_path_factory.mktemp("index")
    if worker_id == "master":  # not under xdist
        build(directory)
        return directory
    shared = tmp_path_factory.getbasetemp().parent / "index-shared"  # one folder per run, for all workers
    with FileLock(f"{shared}.lock"):
        if not (shared / "current").exists():
            build(shared)
    shutil.copytree(shared, directory, symlinks=True, dirs_exist_ok=True)
    return directory


@pytest.fixture(scope="session")
def settings(index_dir) -> Settings:
    return Settings(index_dir=index_dir, seeds_dir=SEEDS)


@pytest.fixture(scope="session")
def corpus():
    from rag.index.corpus import load_corpus

    return load_corpus(SEEDS)


@pytest.fixture(scope="session")
def loaded_index(settings, corpus):
    from rag.index.stores.faiss import load_index

    return load_index(settings, corpus)


@pytest.fixture(scope="session")
def retriever(loaded_index, settings):
    from rag.retrieve.retrieval import Retriever

    return Retriever(loaded_index, settings)


def small_settings(tmp_path, seeds) -> Settings:
    """The English model only: for tests about the index life cycle, not languages."""
    return Settings(index_dir=tmp_path / "index", seeds_dir=seeds, multilingual=False)


@pytest.fixture()
def small_seeds(tmp_path) -> Path:
    """A copy of two seed files: a real but small corpus for index life-cycle tests."""
    directory = tmp_path / "seeds"
    directory.mkdir()
    for path in sorted(SEEDS.glob("*.txt"))[:2]:
        shutil.copy(path, directory / path.name)
    return directory


@pytest.fixture(scope="session")
def small_service(tmp_path_factory) -> dict:
    """The environment of a service over a one-file corpus (English model), its index built once,
    a question one of its papers answers, and a path that is a file (for settings that need a folder)."""
    from rag.index.corpus import load_corpus
    from rag.index.stores.faiss import build_index

    base = tmp_path_factory.mktemp("small")
    seeds = base / "seeds"
    seeds.mkdir()
    shutil.copy(sorted(SEEDS.glob("*.txt"))[0], seeds)
    corpus = load_corpus(seeds)
    build_index(corpus, Settings(index_dir=base / "index", seeds_dir=seeds, multilingual=False))
    named = next(p for p in corpus.papers if not p.name.endswith("…"))
    return {
        "env": {"RAG_INDEX_DIR": str(base / "index"), "RAG_SEEDS_DIR": str(seeds), "RAG_MULTILINGUAL": "false"},
        "question": f"What does {named.name} propose?",
        "a_file": str(seeds / next(seeds.iterdir()).name),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    """`uvicorn server.app:create_app` in a subprocess; its output goes to a file (a pipe that
    nobody reads would fill up and block the server)."""

    def __init__(
        self,
        env: dict,
        log_path: Path,
        args: list[str] | None = None,
        timeout: float = 120,
        until=lambda response: response.status_code == 200,
        cwd: Path = ROOT,
    ):
        port = free_port()
        self.url = f"http://127.0.0.1:{port}"
        self.log_path = log_path
        command = args or [
            sys.executable,
            "-m",
            "uvicorn",
            "server.app:create_app",
            "--factory",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ]
        with open(log_path, "w") as log:
            self.proc = subprocess.Popen(
                [c.replace("{port}", str(port)) for c in command],
                cwd=cwd,
                env={**os.environ, **env},
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.first_health = self.wait(timeout, until)

    def wait(self, timeout: float, until):
        """Poll /health until `until(response)`; return the first answer seen (to check "loading")."""
        first = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited early:\n{self.log()}")
            try:
                response = httpx.get(f"{self.url}/health", timeout=2)
                first = first or response
                if until(response):
                    self.last_health = response
                    return first
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not reach the expected state in time:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def entries(self) -> list[dict]:
        """The service's own log: one JSON object per line (uvicorn's lines are plain text)."""
        return [json.loads(line) for line in self.log().splitlines() if line.startswith("{")]

    def requests(self) -> list[dict]:
        """Its one line per request: method, route, status, ms, request_id."""
        return [e for e in self.entries() if e["logger"] == "rag.http" and e["message"] == "request"]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def index_env(index_dir: Path, **extra) -> dict:
    return {"RAG_INDEX_DIR": str(index_dir), "RAG_SEEDS_DIR": str(SEEDS), **extra}


API_KEY = "s3cret"


@pytest.fixture(scope="session")
def keyed_server(index_dir, tmp_path_factory):
    """The service with an API key (and CORS for one origin), for the tests of what the key guards."""
    running = Server(
        index_env(index_dir, RAG_API_KEY=API_KEY, RAG_CORS_ORIGINS='["http://ui.example"]'),
        tmp_path_factory.mktemp("keyed") / "server.log",
    )
    yield running
    running.stop()


@pytest.fixture(scope="session")
def server(index_dir, tmp_path_factory):
    running = Server(index_env(index_dir), tmp_path_factory.mktemp("logs") / "server.log")
    yield running
    running.stop()


@pytest.fixture(scope="session")
def server_url(server) -> str:
    return server.url


@pytest.fixture(scope="session")
def assistant(loaded_index, settings):
    from rag.assistant import Assistant

    return Assistant(loaded_index, settings.model_copy(update={"generator": "extractive"}))


# -- a scripted LLM: replies given piece by piece, for the branches a real model cannot be made to take
class ScriptedLLM:
    """Stands in for `openai.OpenAI` in `LLMGenerator(settings, client=...)`: each chat call
    streams the next scripted reply (a list of text pieces) or raises it (an exception). Every
    request is kept in `calls`, so a test sees what was asked and how often."""

    def __init__(self, *replies):
        self.replies = list(replies)
        self.calls: list[dict] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    def _create(self, **request):
        self.calls.append(request)
        if not self.replies:
            raise AssertionError(f"an unscripted LLM call: {request['messages'][-1]['content'][:200]}")
        reply = self.replies.pop(0)
        if isinstance(reply, Exception):
            raise reply
        return _ScriptedStream(reply)


class _ScriptedStream:
    def __init__(self, pieces: list[str]):
        self.pieces = pieces

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def __iter__(self):
        for piece in self.pieces:
            yield SimpleNamespace(choices=[SimpleNamespace(delta=SimpleNamespace(content=piece))])


# -- the browser: Debian's Chromium driven by Playwright (never `playwright install`) --------
CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",
]
ARTIFACTS = ROOT / "tests" / "artifacts"


ANSWER = ".turn.assistant"


def ask(page: Page, question: str):
    page.fill("#question", question)
    page.press("#question", "Enter")
    answer = page.locator(ANSWER).last
    expect(answer).not_to_have_class(re.compile("streaming"), timeout=60_000)
    return answer


@pytest.fixture()
def chat(page: Page, server):
    """The chat page of the session's service, loaded and ready for a question."""
    page.goto(server.url + "/")
    expect(page.locator("#question")).to_be_focused()
    return page


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args):
    if not CHROMIUM.exists():
        if os.environ.get("RAG_REQUIRE_BROWSER") == "1":
            pytest.fail("RAG_REQUIRE_BROWSER=1 but /usr/bin/chromium is missing (apt-get install chromium)")
        pytest.skip("browser tests need Debian's Chromium at /usr/bin/chromium: apt-get install chromium")
    return {**browser_type_launch_args, "executable_path": str(CHROMIUM), "args": CHROMIUM_ARGS}


class MilvusServer:
    """`milvus-lite server` bound to 127.0.0.1 (its default is every interface)."""

    def __init__(self, data_dir: Path, port: int | None = None):
        self.data_dir, self.port = data_dir, port or free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.start()

    def start(self) -> None:
        from pymilvus import MilvusClient

        from rag.index.stores.milvus import GRPC_OPTIONS

        self.proc = subprocess.Popen(
            [
                Path(sys.executable).with_name("milvus-lite"),
                "server",
                "--data-dir",
                str(self.data_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 60
        while True:
            try:
                probe = MilvusClient(uri=self.uri, timeout=2, grpc_options=GRPC_OPTIONS)
                probe.list_collections()
                probe.close()
                return
            except Exception:
                assert self.proc.poll() is None, "milvus-lite server exited"
                assert time.monotonic() < deadline, "milvus-lite server did not answer"
                time.sleep(0.2)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def llama_server():
    """llama.cpp's OpenAI-compatible server with SmolLM2-135M-Instruct on loopback; yields its /v1 URL."""
    from eval.llm import smollm2_server

    # One thread: the other core stays with the test process and the service.
    with smollm2_server("--n_threads", "1", "--logits_all", "false") as url:
        yield url


# What `make test-fast` leaves out: tests that drive Chromium, start a Ray cluster or a llama.cpp server.
HEAVY = {"page": "browser", "llama_server": "llama_cpp"}


def pytest_collection_modifyitems(items):
    for item in items:
        for fixture, marker in HEAVY.items():
            if fixture in getattr(item, "fixturenames", ()):
                item.add_marker(marker)
