"""What the benchmarks serve and copy, shared by bench/service.py, bench/profile_service.py,
bench/scale.py, bench/scale_search.py and bench/scale_explore.py: the service on a loopback port
(`Served`), a milvus-lite server, and a FAISS build copied into Milvus. The library is imported
where it is used, so that importing this module stays light."""

from __future__ import annotations

import contextlib
import os
import re
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:
    from rag.common.settings import Settings
    from rag.index.stores.base import KnownVectors

ROOT = Path(__file__).resolve().parent.parent

QUERIES = [
    "rotary position embeddings for vision transformers",
    "speculative decoding with draft models",
    "benchmarks for tool-using agents",
    "federated learning on graphs",
    "medical audio question answering",
    "diffusion language models decoding in parallel",
    "watermarking generated text",
    "spiking neural networks",
    "optimizers for large language model training",
    "robustness of reinforcement learning policies",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class VectorsOf:
    """A build's `remote`: every vector taken from an existing FAISS build (no model runs)."""

    def __init__(self, index):
        self.index = index

    def vectors(self, nodes, sentences, settings, known, encoder=None) -> KnownVectors:
        from rag.index.stores.faiss.build import known_vectors

        return known_vectors(self.index, nodes, sentences)


class Served:
    """`rag serve` (`python -m server.cli serve`) on a free loopback port with `env` and `workers`
    processes, until /health answers 200 from each worker; `start_s` is process start to healthy.
    Its output goes to `log` when one is named, else nowhere."""

    def __init__(self, env: dict, log: Path | None = None, workers: int = 1, timeout: float = 300):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        started = time.perf_counter()
        with open(log, "w") if log else contextlib.nullcontext(subprocess.DEVNULL) as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "server.cli",
                    "serve",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(self.port),
                    "--workers",
                    str(workers),
                ],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        healthy_rounds = 0
        while True:
            try:
                # Each worker answers some of these (a new connection each): all of them healthy, three
                # rounds running, so that the kernel's spreading of connections cannot hide one still loading.
                statuses = {
                    httpx.get(f"{self.url}/health", headers={"Connection": "close"}, timeout=2).status_code
                    for _ in range(4 * workers)
                }
                healthy_rounds = healthy_rounds + 1 if statuses == {200} else 0
                if healthy_rounds == 3:
                    self.start_s = time.perf_counter() - started
                    return
            except httpx.TransportError:
                healthy_rounds = 0
            if self.proc.poll() is not None or time.perf_counter() - started > timeout:
                self.proc.kill()
                told = f":\n{log.read_text()[-3000:]}" if log else ""
                raise RuntimeError(f"the service did not start{told}")
            time.sleep(0.05)

    def peak_rss_mb(self) -> float:
        """VmHWM of the process and its workers."""
        pids = [self.proc.pid] + [
            int(p)
            for p in subprocess.run(["pgrep", "-P", str(self.proc.pid)], capture_output=True, text=True).stdout.split()
        ]
        total = 0
        for pid in pids:
            status = Path(f"/proc/{pid}/status").read_text()
            total += int(re.search(r"VmHWM:\s+(\d+)", status).group(1))
        return total / 1024

    def search_p50(
        self, rounds: int, questions: list[str] = QUERIES, warmup: int = 10, timeout: float = 30
    ) -> tuple[float, float]:
        """p50 and p95 of `rounds` sequential /search requests over `questions`, after `warmup` more."""
        times = []
        with httpx.Client(timeout=timeout) as client:
            for i in range(rounds + warmup):
                started = time.perf_counter()
                response = client.post(f"{self.url}/search", json={"query": questions[i % len(questions)]})
                response.raise_for_status()
                if i >= warmup:
                    times.append((time.perf_counter() - started) * 1000)
        times.sort()
        return statistics.median(times), times[int(len(times) * 0.95) - 1]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


class MilvusServer:
    def __init__(self, data_dir: Path):
        self.port = free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc = subprocess.Popen(
            [
                Path(sys.executable).with_name("milvus-lite"),
                "server",
                "--data-dir",
                str(data_dir),
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        from pymilvus import MilvusClient

        from rag.index.stores.milvus import GRPC_OPTIONS

        for _ in range(300):
            try:
                probe = MilvusClient(uri=self.uri, timeout=2, grpc_options=GRPC_OPTIONS)
                probe.list_collections()
                probe.close()
                return
            except Exception:
                time.sleep(0.2)
        raise RuntimeError("milvus-lite server did not answer")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def milvus_from(faiss_settings: Settings, uri: str, collection: str) -> Settings:
    """The FAISS build of `faiss_settings` copied into Milvus at `uri`, vectors and all (no model runs)."""
    from rag.index.stores.faiss import load_index
    from rag.index.stores.milvus import writer

    source = load_index(faiss_settings)
    settings = faiss_settings.model_copy(
        update={"vector_store": "milvus", "milvus_uri": uri, "milvus_collection": collection}
    )
    writer.build(source.corpus, settings, remote=VectorsOf(source))
    return settings


def env_of(settings: Settings, models: Path) -> dict:
    env = {
        "RAG_INDEX_DIR": str(settings.indexing.index_dir),
        "RAG_SEEDS_DIR": str(settings.indexing.seeds_dir),
        "RAG_MULTILINGUAL": str(settings.indexing.multilingual).lower(),
        "RAG_VECTOR_STORE": settings.store.vector_store,
    }
    if settings.store.vector_store == "milvus":
        env.update(
            RAG_MILVUS_URI=settings.store.milvus_uri,
            RAG_MILVUS_COLLECTION=settings.store.milvus_collection,
            RAG_INDEX_DIR=str(models),
        )
    return env
