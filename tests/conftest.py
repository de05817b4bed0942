"""Shared fixtures: a real index built once per session, a real uvicorn server on loopback."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["TRANSFORMERS_OFFLINE"] = "1"

ROOT = Path(__file__).resolve().parent.parent
SEEDS = ROOT / "seeds"
sys.path.insert(0, str(ROOT))

from rag.config import Settings  # noqa: E402


@pytest.fixture(scope="session")
def index_dir(tmp_path_factory) -> Path:
    """The full corpus indexed once for the session, with the default settings."""
    from rag.corpus import load_corpus
    from rag.index import build_index

    directory = tmp_path_factory.mktemp("index")
    settings = Settings(index_dir=directory, seeds_dir=SEEDS)
    build_index(load_corpus(SEEDS), settings)
    return directory


@pytest.fixture(scope="session")
def settings(index_dir) -> Settings:
    return Settings(index_dir=index_dir, seeds_dir=SEEDS)


@pytest.fixture(scope="session")
def corpus():
    from rag.corpus import load_corpus

    return load_corpus(SEEDS)


@pytest.fixture(scope="session")
def loaded_index(settings, corpus):
    from rag.index import load_index

    return load_index(settings, corpus)


@pytest.fixture(scope="session")
def retriever(loaded_index, settings):
    from rag.retrieval import Retriever

    return Retriever(loaded_index, settings)


@pytest.fixture()
def small_seeds(tmp_path) -> Path:
    """A copy of two seed files: a real but small corpus for index life-cycle tests."""
    directory = tmp_path / "seeds"
    directory.mkdir()
    for path in sorted(SEEDS.glob("*.txt"))[:2]:
        shutil.copy(path, directory / path.name)
    return directory


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(env: dict, timeout: float = 120) -> tuple[subprocess.Popen, str]:
    """Start `uvicorn server.app:create_app` in a subprocess and wait until /health answers."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "server.app:create_app", "--factory",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited early:\n{proc.stdout.read()}")
        try:
            if httpx.get(f"{url}/health", timeout=1).status_code == 200:
                return proc, url
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("server did not become healthy in time")


@pytest.fixture(scope="session")
def server_url(index_dir):
    proc, url = start_server({"RAG_INDEX_DIR": str(index_dir), "RAG_SEEDS_DIR": str(SEEDS)})
    yield url
    proc.terminate()
    proc.wait(timeout=20)


@pytest.fixture(scope="session")
def assistant(loaded_index, settings):
    from rag.assistant import Assistant

    return Assistant(loaded_index, settings.model_copy(update={"generator": "extractive"}))
