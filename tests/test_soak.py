"""Load with faults: mixed /search and /ask (JSON and streamed) from several clients, a share of
bad requests, and new papers added half-way, against the real service. Zero 5xx, zero lost
papers, memory flat.

Short in `make test` (RAG_SOAK_SECONDS, default 20); `make soak` runs it for 5 minutes and
prints the figures (also written to bench/results/soak.json).
"""

import json
import os
import random
import re
import shutil
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from .conftest import ROOT, SEEDS, Server

SECONDS = float(os.environ.get("RAG_SOAK_SECONDS", "20"))
CLIENTS = 6
QUESTIONS = [
    "What speedup does Jacobi Forcing report?",
    "rotary embeddings for vision transformers",
    "What is MedMosaic?",
    "How do diffusion language models cache?",
    "quantization of vision-language models",
    "What is the capital of France?",
    "那篇论文研究了扩散语言模型？",
]
BAD = [  # (method, path, body or raw bytes, expected status)
    ("POST", "/search", b"{not json", 400),
    ("POST", "/search", {"query": "   "}, 422),
    ("POST", "/search", {"query": "x", "k": 0}, 422),
    ("POST", "/ask", {"question": "x" * 3000}, 422),
    ("POST", "/ask", {"question": "hi", "history": [{"role": "system", "content": "x"}]}, 422),
    ("POST", "/ask", b"x" * 70_000, 413),
    ("GET", "/papers/does-not-exist", None, 404),
    ("GET", "/search", None, 405),
    ("POST", "/papers", {"filename": "x.txt", "content": "only a header line"}, 400),
]
NEW_PAPERS = "Soak test abstracts\n\n" + "\n\n".join(
    f"We propose SoakNet-{i}, a retrieval method for long scientific documents that indexes section "
    f"graphs; on {i + 3} benchmarks it improves recall at ten by {i + 4} points over dense baselines. "
    "Its index is built once and updated in place as documents change."
    for i in range(3)
)

WARM_PAPER = (
    "Warm-up\n\nWe propose WarmNet, a caching method for retrieval services that keeps recent "
    "answers and serves a repeated question from memory; on two benchmarks of real traffic it halves "
    "the latency of a service at the same recall.\n"
)


def rss_mb(pid: int) -> float:
    return int(re.search(r"VmRSS:\s+(\d+)", Path(f"/proc/{pid}/status").read_text()).group(1)) / 1024


def one_request(client: httpx.Client, rng: random.Random) -> tuple[str, int, bool]:
    """A random request; returns (kind, status, status as expected)."""
    roll = rng.random()
    if roll < 0.4:
        response = client.post("/search", json={"query": rng.choice(QUESTIONS), "k": rng.randint(1, 10)})
        return "search", response.status_code, response.status_code == 200
    if roll < 0.65:
        response = client.post("/ask", json={"question": rng.choice(QUESTIONS)})
        return "ask", response.status_code, response.status_code == 200 and "answer" in response.json()
    if roll < 0.8:
        with client.stream("POST", "/ask", json={"question": rng.choice(QUESTIONS), "stream": True}) as response:
            events = [line for line in response.iter_lines() if line.startswith("event:")]
        return "ask stream", response.status_code, response.status_code == 200 and events[-1:] == ["event: done"]
    method, path, body, expected = rng.choice(BAD)
    if isinstance(body, bytes):
        response = client.request(method, path, content=body, headers={"Content-Type": "application/json"})
    else:
        response = client.request(method, path, json=body)
    return "bad", response.status_code, response.status_code == expected and "error" in response.json()


def test_soak_mixed_load_with_bad_requests_and_an_add(index_dir, tmp_path):
    seeds = tmp_path / "seeds"
    shutil.copytree(SEEDS, seeds)
    shutil.copytree(index_dir, tmp_path / "index", symlinks=True)
    server = Server({"RAG_INDEX_DIR": str(tmp_path / "index"), "RAG_SEEDS_DIR": str(seeds)}, tmp_path / "server.log")
    try:
        # One add before the measured one: an add first loads what only adds use (chunking's nltk,
        # which imports scikit-learn, which imports pandas and pyarrow when they are installed, as
        # Ray Data in the test extra brings them), a one-time cost of about 100 MB, not growth.
        warm = httpx.post(f"{server.url}/papers", timeout=300, json={"filename": "warm.txt", "content": WARM_PAPER})
        assert warm.status_code == 201, warm.text
        before = {p["paper_id"] for p in httpx.get(f"{server.url}/papers").json()["papers"]}
        statuses, kinds, unexpected = Counter(), Counter(), []
        lock = threading.Lock()
        deadline = time.monotonic() + SECONDS

        def client_loop(seed: int):
            rng = random.Random(seed)
            with httpx.Client(base_url=server.url, timeout=60) as client:
                while time.monotonic() < deadline:
                    kind, status, ok = one_request(client, rng)
                    with lock:
                        statuses[status] += 1
                        kinds[kind] += 1
                        if not ok:
                            unexpected.append((kind, status))

        clients = [threading.Thread(target=client_loop, args=(seed,)) for seed in range(CLIENTS)]
        for thread in clients:
            thread.start()
        time.sleep(SECONDS / 4)  # the first reading is of a process already serving under load
        rss_start = rss_mb(server.proc.pid)
        time.sleep(SECONDS / 4)
        added = httpx.post(f"{server.url}/papers", json={"filename": "soak.txt", "content": NEW_PAPERS}, timeout=300)
        for thread in clients:
            thread.join()
        rss_end = rss_mb(server.proc.pid)

        after = {p["paper_id"] for p in httpx.get(f"{server.url}/papers").json()["papers"]}
        new_ids = {p["paper_id"] for p in added.json()["added"]}
        found = httpx.post(f"{server.url}/search", json={"query": "SoakNet-1 section graphs", "k": 3}).json()
        figures = {
            "seconds": SECONDS,
            "clients": CLIENTS,
            "requests": sum(statuses.values()),
            "by_kind": dict(kinds),
            "statuses": {str(k): v for k, v in sorted(statuses.items())},
            "unexpected": unexpected[:20],
            "server_errors": sum(v for k, v in statuses.items() if k >= 500),
            "papers_before": len(before),
            "papers_added": len(new_ids),
            "papers_after": len(after),
            "papers_lost": len(before - after),
            "rss_start_mb": round(rss_start, 1),
            "rss_end_mb": round(rss_end, 1),
        }
        print(json.dumps(figures, indent=1))
        results = ROOT / "bench" / "results"
        results.mkdir(parents=True, exist_ok=True)
        (results / "soak.json").write_text(json.dumps(figures, indent=1))

        assert added.status_code == 201 and len(new_ids) == 3
        assert figures["server_errors"] == 0 and not unexpected, figures
        assert before <= after and after == before | new_ids  # nothing lost, nothing doubled
        assert "SoakNet-1" in found["results"][0]["name"]
        assert figures["requests"] > SECONDS  # the service kept answering throughout
        assert rss_end < rss_start + 150, figures  # the add reloads the index once; no growth per request
        assert "Traceback" not in server.log()
    finally:
        server.stop()
