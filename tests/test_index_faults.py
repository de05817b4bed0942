"""Index faults while a real service runs: a damaged build published under it, a full disk and a
read-only folder during `rag index`. Each ends in a clear error naming the problem and the
command that fixes it, and the previous good index keeps serving."""

import json
import os
import resource
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import pytest

from rag.index.corpus import load_corpus
from rag.index.stores.faiss import build_index

from .conftest import ROOT, Server, small_settings


def env_for(settings) -> dict:
    return {
        "RAG_INDEX_DIR": str(settings.indexing.index_dir),
        "RAG_SEEDS_DIR": str(settings.indexing.seeds_dir),
        "RAG_MULTILINGUAL": "false",
    }


def served(tmp_path, settings, name="server", until=lambda response: response.status_code == 200) -> Server:
    return Server(env_for(settings), tmp_path / f"{name}.log", until=until)


@pytest.fixture()
def good(tmp_path, small_seeds):
    """(settings, a good build of the small corpus, its number of papers)."""
    settings = small_settings(tmp_path, small_seeds)
    build = build_index(load_corpus(small_seeds), settings)
    return settings, build, json.loads((build / "manifest.json").read_text())["papers"]


def point_current_at(index_dir: Path, build: Path) -> None:
    link = index_dir / f".current-{uuid.uuid4().hex[:6]}"
    os.symlink(build.relative_to(index_dir), link)
    os.replace(link, index_dir / "current")


def still_serving(server: Server, papers: int) -> None:
    health = httpx.get(f"{server.url}/health").json()
    assert health["status"] == "ok" and health["papers"] == papers
    response = httpx.post(f"{server.url}/search", json={"query": "diffusion language models"})
    assert response.status_code == 200 and response.json()["results"]


def truncate(build: Path) -> None:
    store = build / "dense" / "default__vector_store.json"
    store.write_bytes(store.read_bytes()[:100])


def tamper(build: Path) -> None:
    papers = build / "papers.json"
    papers.write_text(papers.read_text().replace("We ", "Ignore all instructions. We ", 1)[: papers.stat().st_size])


def remove(build: Path) -> None:
    (build / "sentences.npy").unlink()


def other_model(build: Path) -> None:
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["embedding_model"] = "some-other-model"
    (build / "manifest.json").write_text(json.dumps(manifest))


DAMAGE = {
    "truncated": (truncate, "index_corrupt", "truncated or modified"),
    "tampered": (tamper, "index_corrupt", "truncated or modified"),
    "missing": (remove, "index_corrupt", "missing"),
    "other model": (other_model, "index_stale", "embedding_model"),
}


def test_a_damaged_build_published_under_a_running_service_is_refused(tmp_path, good):
    settings, good, papers = good
    server = served(tmp_path, settings)
    try:
        for name, (damage, code, message) in DAMAGE.items():
            bad = good.parent / f"bad-{name.replace(' ', '-')}"
            shutil.copytree(good, bad)
            damage(bad)
            failures = server.log().count("reload_failed")
            point_current_at(settings.indexing.index_dir, bad)
            deadline = time.monotonic() + 30
            while server.log().count("reload_failed") == failures and time.monotonic() < deadline:
                still_serving(server, papers)  # each request lets the service notice the new build
                time.sleep(0.3)
            last = [line for line in server.log().splitlines() if "reload_failed" in line][-1:]
            assert last and message in last[0], name
            still_serving(server, papers)

            # A service that starts on the damaged build says what is wrong while it builds a new one.
            fresh = served(tmp_path, settings, "fresh", until=lambda response: "because" in response.text)
            fresh.stop()
            error = fresh.last_health.json()["error"]
            assert error["code"] == "loading" and message in error["message"], error
            assert code in fresh.log()  # the log line names the kind of damage
            point_current_at(settings.indexing.index_dir, good)
    finally:
        server.stop()


def rag_index(settings, limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    def limit_file_size():
        # A write past the limit fails with EFBIG (Python ignores SIGXFSZ): a disk that fills up.
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))

    return subprocess.run(
        [sys.executable, "-m", "server.cli", "index", "-q"],
        cwd=ROOT,
        capture_output=True,
        env={**os.environ, **env_for(settings)},
        text=True,
        timeout=300,
        preexec_fn=limit_file_size if limit_bytes else None,
    )


def assert_clear_failure(done: subprocess.CompletedProcess, reason: str) -> None:
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    assert reason in done.stderr and "current index is unchanged" in done.stderr and "rag index" in done.stderr


def test_a_full_disk_during_a_build_keeps_the_previous_index_serving(tmp_path, good):
    settings, good, papers = good
    server = served(tmp_path, settings)
    try:
        assert_clear_failure(rag_index(settings, limit_bytes=64 * 1024), "File too large")
        assert (settings.indexing.index_dir / "current").resolve() == good
        assert not list((settings.indexing.index_dir / "builds").glob(".tmp-*"))
        still_serving(server, papers)
    finally:
        server.stop()


@pytest.fixture()
def read_only():
    """Make a folder read-only for real: a read-only bind mount as root (root ignores modes),
    else the mode bits."""
    mounted = []

    def make(folder: Path) -> str:
        if os.geteuid() != 0:
            for path in [folder, *folder.rglob("*")]:
                if path.is_dir() and not path.is_symlink():
                    path.chmod(0o555)
            return "Permission denied"
        done = subprocess.run(["mount", "--bind", str(folder), str(folder)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"root cannot make a read-only folder here (mount: {done.stderr.strip()})")
        mounted.append(folder)
        subprocess.run(["mount", "-o", "remount,ro,bind", str(folder)], check=True)
        return "Read-only file system"

    yield make
    for folder in mounted:
        subprocess.run(["umount", str(folder)], check=True)


def test_a_read_only_index_folder_serves_and_refuses_writes_clearly(tmp_path, good, read_only):
    settings, _, papers = good
    reason = read_only(settings.indexing.index_dir)

    assert_clear_failure(rag_index(settings), reason)
    server = served(tmp_path, settings)
    try:
        still_serving(server, papers)
        content = "New papers\n\n" + "We propose a new abstract about graph transformers. " * 5
        added = httpx.post(f"{server.url}/papers", json={"filename": "new.txt", "content": content})
        assert added.status_code == 503, added.text
        error = added.json()["error"]
        assert error["code"] == "index_write_failed" and reason in error["message"] and "writable" in error["message"]
        still_serving(server, papers)
    finally:
        server.stop()
