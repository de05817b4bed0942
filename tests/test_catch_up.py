"""Crash-consistent adds and catch-up: writers killed at every stage, seed folders edited by hand.

The kills are real SIGKILLs of real processes (`rag add`, a uvicorn server serving POST
/papers); RAG_PAUSE_AT stops the writer at a named stage so that the kill lands there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from rag.index.corpus import load_corpus
from rag.index.stores import index_seeds
from rag.index.stores.faiss import build_index, load_index
from rag.retrieve.retrieval import Retriever

from .conftest import ROOT, SEEDS, Server, small_settings

NEW_FILE = sorted(SEEDS.glob("*.txt"))[2]  # 19 abstracts that the two-file corpus lacks
NEW_PAPERS = 19
STAGES = ["seed-written", "embedding", "writing", "before-publish", "after-publish"]
PUBLISHED = {"after-publish"}  # stages at which the add's build is already current


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> Path:
    """Two seed files and their index, built once; each test works on a copy."""
    root = tmp_path_factory.mktemp("pristine")
    seeds = root / "seeds"
    seeds.mkdir()
    for path in sorted(SEEDS.glob("*.txt"))[:2]:
        shutil.copy(path, seeds / path.name)
    build_index(load_corpus(seeds), small_settings(root, seeds))
    return root


@pytest.fixture()
def workspace(pristine, tmp_path) -> Path:
    shutil.copytree(pristine, tmp_path / "w", symlinks=True)
    return tmp_path / "w"


def env_of(workspace: Path, **extra) -> dict:
    return {
        **os.environ,
        "RAG_INDEX_DIR": str(workspace / "index"),
        "RAG_SEEDS_DIR": str(workspace / "seeds"),
        "RAG_MULTILINGUAL": "false",
        **extra,
    }


def rag(workspace: Path, *args, **extra) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "server.cli", *args],
        cwd=ROOT,
        env=env_of(workspace, **extra),
        capture_output=True,
        text=True,
        timeout=300,
    )


def wait_for(path: Path, proc=None, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc is None or proc.poll() is None, "the writer exited before reaching its pause"
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        time.sleep(0.05)


def assert_consistent(workspace: Path, papers: int) -> None:
    """The seed folder and the published index hold the same papers, each once, `papers` of them."""
    settings = small_settings(workspace, workspace / "seeds")
    seeds = load_corpus(workspace / "seeds")
    index = load_index(settings)
    assert [p.paper_id for p in index.corpus.papers] == [p.paper_id for p in seeds.papers]
    assert len(index.corpus) == len(seeds) == papers
    assert seeds.paragraphs == index.corpus.paragraphs  # no abstract written twice into the folder
    assert not list((workspace / "seeds").glob(".*.pending"))
    assert not list((workspace / "index" / "builds").glob(".tmp-*"))


@pytest.mark.parametrize("stage", STAGES)
def test_rag_add_killed_at_each_stage(workspace, stage):
    before = len(load_corpus(workspace / "seeds"))
    add = subprocess.Popen(
        [sys.executable, "-m", "server.cli", "add", str(NEW_FILE)],
        cwd=ROOT,
        env=env_of(workspace, RAG_PAUSE_AT=stage),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for(workspace / "index" / f".paused-{stage}", add)
    add.send_signal(signal.SIGKILL)
    add.wait()

    # The CLI answers at once, from the index, without a rebuild or a note that the seeds moved.
    found = rag(
        workspace,
        "search",
        "converting ANNs to spiking networks with carried-over membrane potentials",
        "-k",
        "1",
        "--json",
    )
    assert found.returncode == 0, found.stderr
    assert "seed folder changed" not in found.stderr
    expected = before + NEW_PAPERS if stage in PUBLISHED else before
    assert_consistent(workspace, expected)

    retried = rag(workspace, "add", str(NEW_FILE))
    assert retried.returncode == 0, retried.stderr
    added = 0 if stage in PUBLISHED else NEW_PAPERS
    assert f"{added} added, {NEW_PAPERS - added} already indexed" in retried.stdout
    assert_consistent(workspace, before + NEW_PAPERS)
    assert "up to date" in rag(workspace, "index", "--if-needed").stdout


@pytest.mark.parametrize("stage", STAGES)
def test_a_server_killed_during_post_papers(workspace, stage, tmp_path):
    before = len(load_corpus(workspace / "seeds"))
    body = {"filename": NEW_FILE.name, "content": NEW_FILE.read_text()}
    paused = Server({**env_of(workspace), "RAG_PAUSE_AT": stage}, tmp_path / "paused.log")
    poster = threading.Thread(target=lambda: _post_quietly(f"{paused.url}/papers", body), daemon=True)
    poster.start()
    wait_for(workspace / "index" / f".paused-{stage}", paused.proc)
    paused.proc.send_signal(signal.SIGKILL)
    paused.proc.wait()
    poster.join(timeout=30)

    restarted = Server(env_of(workspace), tmp_path / "restarted.log", timeout=60)
    try:
        expected = before + NEW_PAPERS if stage in PUBLISHED else before
        health = restarted.last_health.json()
        assert health["papers"] == expected and health["pending_papers"] == 0, health
        assert_consistent(workspace, expected)
        retried = httpx.post(f"{restarted.url}/papers", json=body, timeout=300)
        assert retried.status_code == 201, retried.text
        assert len(retried.json()["added"]) == (0 if stage in PUBLISHED else NEW_PAPERS)
        assert retried.json()["papers"] == before + NEW_PAPERS
        assert_consistent(workspace, before + NEW_PAPERS)
    finally:
        restarted.stop()


def _post_quietly(url: str, body: dict) -> None:
    """The request the kill interrupts: its connection breaks, which is the point."""
    with contextlib.suppress(httpx.HTTPError):
        httpx.post(url, json=body, timeout=120)


QUERIES = [
    "spiking neural networks",
    "diffusion language models",
    "rotary position embeddings",
    "benchmark for agents",
    "federated learning",
    "speculative decoding",
]


def test_hand_edits_are_caught_up_to_what_a_full_rebuild_gives(workspace, tmp_path):
    """A seed file added, one edited (an abstract dropped, one reworded), one removed: only the
    papers that changed are embedded, and the index equals a full rebuild's."""
    seeds = workspace / "seeds"
    first, second = sorted(seeds.glob("*.txt"))
    shutil.copy(NEW_FILE, seeds / NEW_FILE.name)
    header, *abstracts = first.read_text().split("\n\n")
    reworded = abstracts[0].replace(" the ", " this ", 1)
    assert reworded != abstracts[0]
    first.write_text("\n\n".join([header, reworded, *abstracts[2:]]))
    second.unlink()
    settings = small_settings(workspace, seeds)
    old = load_index(settings).corpus
    target = load_corpus(seeds)
    new_ids = [p.paper_id for p in target.papers if old.get(p.paper_id) is None]
    assert len(new_ids) == NEW_PAPERS + 1  # the new file's papers and the reworded abstract

    report = index_seeds(settings, only_if_stale=True)
    assert report.caught_up and report.added == len(new_ids)
    assert report.removed == len(old) - (len(target) - len(new_ids))
    caught_up = load_index(settings)
    chunks_of_new = sum(pid in new_ids for pid in caught_up.dense.paper_ids)
    sentences_of_new = sum(s.paper_id in new_ids for s in caught_up.sentences)
    assert caught_up.manifest["embedded"] == {"chunks": chunks_of_new, "sentences": sentences_of_new}

    full_settings = small_settings(tmp_path / "full", seeds)
    build_index(load_corpus(seeds), full_settings)
    full = load_index(full_settings)
    assert [p.paper_id for p in caught_up.corpus.papers] == [p.paper_id for p in full.corpus.papers]
    assert [s for s in caught_up.sentences] == [s for s in full.sentences]
    cosines = np.sum(caught_up.sentence_vectors * full.sentence_vectors, axis=1)
    assert cosines.min() > 0.9999
    for query in QUERIES:
        ours = Retriever(caught_up, settings).search(query, 5).hits
        theirs = Retriever(full, full_settings).search(query, 5).hits
        assert [h.paper.paper_id for h in ours] == [h.paper.paper_id for h in theirs], query
    assert index_seeds(settings, only_if_stale=True).build is None
