"""Incremental ingestion: `rag add` and POST /papers add abstracts without a full rebuild."""

import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

import rag.index.stores.faiss.folders as folders
from rag.common.errors import IndexWriteError
from rag.index.corpus import load_corpus
from rag.index.stores import add_seed_texts
from rag.index.stores.faiss import build_index, load_index

from .conftest import ROOT, SEEDS, Server, small_settings

NEW_FILE = sorted(SEEDS.glob("*.txt"))[2]  # 19 abstracts that the two-file corpus lacks


def built_small_index(tmp_path, seeds) -> tuple:
    """A small index, the number of its papers, and the environment of the CLI on it."""
    settings = small_settings(tmp_path, seeds)
    build_index(load_corpus(seeds), settings)
    env = {
        **os.environ,
        "RAG_INDEX_DIR": str(settings.indexing.index_dir),
        "RAG_SEEDS_DIR": str(seeds),
        "RAG_MULTILINGUAL": "false",
    }
    return settings, len(load_index(settings).corpus), env


def test_rag_add_adds_new_papers_once_and_keeps_the_seeds_in_step(tmp_path, small_seeds):
    settings, before, env = built_small_index(tmp_path, small_seeds)

    def rag(*args):
        return subprocess.run(
            [sys.executable, "-m", "server.cli", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
        )

    first = rag("add", str(NEW_FILE))
    assert first.returncode == 0, first.stderr
    assert "19 added, 0 already indexed" in first.stdout
    again = rag("add", str(NEW_FILE))
    assert "0 added, 19 already indexed" in again.stdout
    index = load_index(settings, load_corpus(small_seeds))  # the seeds and the index agree
    assert len(index.corpus) == before + 19
    assert len({p.paper_id for p in index.corpus.papers}) == before + 19
    assert "up to date" in rag("index", "--if-needed").stdout
    found = rag("search", "converting ANNs to spiking networks with carried-over membrane potentials", "-k", "1")
    assert "CRPI" in found.stdout
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\x00\x01binary")
    out = rag("add", str(bad))
    assert out.returncode == 1 and "bad.txt" in out.stderr and "Traceback" not in out.stderr


def test_a_crash_mid_add_loses_nothing_already_indexed(tmp_path, small_seeds, monkeypatch):
    settings = small_settings(tmp_path, small_seeds)
    good = build_index(load_corpus(small_seeds), settings)
    before = load_index(settings).corpus

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(folders, "_file_table", crash)
    with pytest.raises(IndexWriteError, match="disk full"):
        add_seed_texts(settings, [(NEW_FILE.name, NEW_FILE.read_bytes())])
    after = load_index(settings)
    assert after.path == good
    assert [p.paper_id for p in after.corpus.papers] == [p.paper_id for p in before.papers]
    assert not list((settings.indexing.index_dir / "builds").glob(".tmp-*"))


def test_post_papers_while_four_clients_search(tmp_path, small_seeds):
    settings = small_settings(tmp_path, small_seeds)
    build_index(load_corpus(small_seeds), settings)
    env = {
        "RAG_INDEX_DIR": str(settings.indexing.index_dir),
        "RAG_SEEDS_DIR": str(small_seeds),
        "RAG_MULTILINGUAL": "false",
        "RAG_API_KEY": "adder",
    }
    server = Server(env, tmp_path / "a.log")
    other = Server(env, tmp_path / "b.log")  # another worker on the same index
    auth = {"Authorization": "Bearer adder"}
    statuses, stop = [], threading.Event()

    def searcher():
        with httpx.Client(base_url=server.url, headers=auth, timeout=60) as client:
            while not stop.is_set():
                response = client.post("/search", json={"query": "spiking neural networks", "k": 3})
                statuses.append((response.status_code, len(response.json().get("results", []))))

    threads = [threading.Thread(target=searcher) for _ in range(4)]
    try:
        for thread in threads:
            thread.start()
        body = {"filename": NEW_FILE.name, "content": NEW_FILE.read_text()}
        assert httpx.post(f"{server.url}/papers", json=body, timeout=300).status_code == 401
        added = httpx.post(f"{server.url}/papers", json=body, headers=auth, timeout=300)
        assert added.status_code == 201, added.text
        assert len(added.json()["added"]) == 19 and added.json()["duplicates"] == []
        time.sleep(1)
        stop.set()
        for thread in threads:
            thread.join()
        assert len(statuses) > 20
        assert set(statuses) == {(200, 3)}  # old or new index, never a broken one

        count = added.json()["papers"]
        assert len(httpx.get(f"{server.url}/papers", headers=auth).json()["papers"]) == count
        again = httpx.post(f"{server.url}/papers", json=body, headers=auth, timeout=300).json()
        assert again["added"] == [] and len(again["duplicates"]) == 19 and again["papers"] == count
        bad = httpx.post(f"{server.url}/papers", json={"filename": "x.txt", "content": "only a header"}, headers=auth)
        assert bad.status_code == 400 and bad.json()["error"]["code"] == "corpus_error"

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            listing = httpx.get(f"{other.url}/papers", headers=auth).json()
            assert "papers" in listing, (listing, other.log()[-2000:])
            if len(listing["papers"]) == count:
                break
            time.sleep(0.5)
        else:
            pytest.fail("the other worker never picked up the new build")
    finally:
        stop.set()
        server.stop()
        other.stop()


def test_a_rebuild_and_an_add_at_once_lose_no_paper(tmp_path, small_seeds):
    """`rag index` reads the seeds under the lock `rag add` takes: whichever goes first, the
    published index holds the old papers and the added ones."""
    settings, before, env = built_small_index(tmp_path, small_seeds)

    def start(*args):
        return subprocess.Popen(
            [sys.executable, "-m", "server.cli", *args],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )

    rebuild = start("index", "-q")
    add = start("add", str(NEW_FILE))
    for proc in (rebuild, add):
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
    index = load_index(settings, load_corpus(small_seeds))
    assert len(index.corpus) == before + 19
    assert {p.paper_id for p in load_corpus(small_seeds).papers} == {p.paper_id for p in index.corpus.papers}
