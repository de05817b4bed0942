"""The Milvus store: one index that service replicas on several machines share.

With `RAG_VECTOR_STORE=milvus` the papers, chunks and sentences live in Milvus (Milvus Lite in a
local file, or a server at `RAG_MILVUS_URI`), and a service replica holds no index files: it
reads the paper table at start, searches Milvus for every question, and follows what other
replicas add. The collection is the record of the papers added through it (no seed file is
written), so a rebuild from the seed folder keeps them. collections.py names and makes the
collections, reader.py answers from them, writer.py writes them.

Written with pymilvus directly rather than LlamaIndex's MilvusVectorStore: we need two dense
fields (MiniLM and multilingual-e5) and a BM25 function in one collection, the dense and BM25
rankings separately (our paper-level fusion weighs them per question and keeps the raw cosine
for abstention), a sentence table, and control of the write order that makes adds atomic.
"""

from __future__ import annotations

from collections.abc import Iterable
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING

import numpy as np

from rag.common.settings import Settings
from rag.index import titles
from rag.index.corpus import Corpus, Paper
from rag.index.stores.base import Published, document_encoder, pause_point, titles_of
from rag.index.stores.milvus import writer
from rag.index.stores.milvus.collections import GRPC_OPTIONS, id_filter, milvus_errors
from rag.index.stores.milvus.reader import MilvusIndex, load

if TYPE_CHECKING:
    from rag.index.ray_embedding import RayEmbedding

__all__ = ["GRPC_OPTIONS", "MilvusIndex", "MilvusStore", "load"]


def _published(settings: Settings, manifest: dict) -> Published:
    return Published(writer.where(settings, manifest), manifest["chunks"], manifest["papers"], titles_of(manifest))


class MilvusStore:
    name = "milvus"
    records_adds = True

    def load(self, settings: Settings, check: bool = True) -> MilvusIndex:
        return load(settings, check)

    def open(self, settings: Settings) -> MilvusIndex:
        return load(settings)  # a writer's steps are each whole in Milvus: nothing to recover

    def writing(self, settings: Settings) -> AbstractContextManager[None]:
        """No lock: two writers' adds interleave paper by paper, each paper whole."""
        return milvus_errors(settings)

    def up_to_date(self, settings: Settings, seeds: Corpus) -> bool:
        return False  # the seed papers are compared with the collection's, which needs a load

    def build(self, corpus: Corpus, settings: Settings, show_progress: bool, remote: RayEmbedding | None) -> Published:
        return _published(settings, writer.build(corpus, settings, show_progress, remote))

    def catch_up(
        self,
        previous: MilvusIndex,
        seeds: Corpus,
        added: list[Paper],
        removed: list[str],
        settings: Settings,
        show_progress: bool,
        remote: RayEmbedding | None,
    ) -> Published | None:
        if not added and not removed:
            return None
        manifest = previous.manifest
        if removed:
            manifest = writer.remove_papers(previous.client, settings, removed)
        if added:
            manifest = writer.add_papers(
                previous.client,
                settings,
                added,
                document_encoder(settings),
                previous.multilingual_embedder,
                _contrast(previous, settings),
            )
        return _published(settings, manifest)

    def held(self, index: MilvusIndex, paper_ids: Iterable[str]) -> set[str]:
        """Asked of the collection: another replica may have added them since `index` was read."""
        rows = index.client.query(
            index.names.of("papers"), filter=id_filter(paper_ids), output_fields=["paper_id"], limit=16384
        )
        return {r["paper_id"] for r in rows}

    def add(self, index: MilvusIndex, files: dict[str, bytes], papers: list[Paper], settings: Settings) -> Published:
        pause_point(settings, "seed-written")
        manifest = writer.add_papers(
            index.client,
            settings,
            papers,
            document_encoder(settings),
            index.multilingual_embedder,
            _contrast(index, settings),
        )
        pause_point(settings, "after-publish")
        return _published(settings, manifest)

    def seeds_changed(self, settings: Settings, index: MilvusIndex) -> bool:
        return False  # the collection is its own record; replicas need no seed folder


def _contrast(index: MilvusIndex, settings: Settings) -> np.ndarray:
    """The vectors of the papers (a seeded sample) that a new paper's derived title is told apart
    from: each the mean of its sentences' vectors, as a build computes it."""
    papers = index.corpus.papers
    ids = [papers[i].paper_id for i in titles.contrast_rows(len(papers), settings)]
    rows = index.sentences_of(ids)
    return np.array([rows[pid].vectors.mean(axis=0) for pid in ids if pid in rows and len(rows[pid].vectors)])
