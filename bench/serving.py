"""What the benchmarks serve and copy, shared by bench/scale.py and bench/scale_search.py: the
service on a loopback port, a milvus-lite server, and a FAISS build copied into Milvus."""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import httpx

from rag.common.settings import Settings
from rag.index.stores.base import KnownVectors
from rag.index.stores.faiss import load_index
from rag.index.stores.faiss.build import known_vectors
from rag.index.stores.milvus import GRPC_OPTIONS

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
        return known_vectors(self.index, nodes, sentences)


class Served:
    """`uvicorn server.app:create_app` on 127.0.0.1 with `env`, until /health answers 200."""

    def __init__(self, env: dict, log: Path):
        self.url = f"http://127.0.0.1:{free_port()}"
        started = time.perf_counter()
        with open(log, "w") as out:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "uvicorn",
                    "server.app:create_app",
                    "--factory",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    self.url.rsplit(":", 1)[1],
                    "--log-level",
                    "warning",
                ],
                cwd=ROOT,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        deadline = time.monotonic() + 300
        while True:
            try:
                if httpx.get(f"{self.url}/health", timeout=2).status_code == 200:
                    self.start_s = time.perf_counter() - started  # process start to healthy
                    return
            except httpx.TransportError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"server did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)

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
    from rag.index.stores.milvus import writer

    source = load_index(faiss_settings)
    settings = faiss_settings.model_copy(
        update={"vector_store": "milvus", "milvus_uri": uri, "milvus_collection": collection}
    )
    writer.build(source.corpus, settings, remote=VectorsOf(source))
    return settings


def env_of(settings: Settings, models: Path) -> dict:
    env = {
        "RAG_INDEX_DIR": str(settings.index_dir),
        "RAG_SEEDS_DIR": str(settings.seeds_dir),
        "RAG_MULTILINGUAL": str(settings.multilingual).lower(),
        "RAG_VECTOR_STORE": settings.vector_store,
    }
    if settings.vector_store == "milvus":
        env.update(
            RAG_MILVUS_URI=settings.milvus_uri,
            RAG_MILVUS_COLLECTION=settings.milvus_collection,
            RAG_INDEX_DIR=str(models),
        )
    return env
