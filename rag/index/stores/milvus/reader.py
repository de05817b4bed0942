"""The `SearchIndex` a service replica reads from Milvus: it holds the paper table (with the map) only and
asks Milvus for every ranking and for the sentences of the papers it answers from."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING

import numpy as np

from rag.common.settings import Settings
from rag.index.chunking import split_sentences
from rag.index.corpus import Corpus
from rag.index.lexicon import Lexicon
from rag.index.stores.base import Ranked, SentenceRows, check_parameters, multilingual_encoder, question_encoder
from rag.index.stores.milvus.collections import (
    NOT_LOADED,
    TABLES,
    UNREACHABLE,
    Names,
    bm25_words,
    connect,
    current_meta,
    id_filter,
    load_papers,
    loaded,
    milvus_errors,
    read_meta,
)
from rag.index.topics import Topic, TopicMap

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding


class _Recent:
    """A bounded map that forgets the least recently used entry (thread-safe). Hand-written:
    functools.lru_cache caches calls, not a batch lookup."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
            return None

    def put(self, key, value) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)


_SENTENCES = _Recent(4096)  # papers' sentence rows: about 25 KB each with both encoders


class MilvusIndex:
    """The `SearchIndex` a service replica reads from Milvus; it holds the paper table only."""

    store = "milvus"

    def __init__(
        self,
        client,
        settings: Settings,
        manifest: dict,
        corpus: Corpus,
        topic_map: TopicMap,
        embedder: BaseEmbedding,
        multilingual_embedder: BaseEmbedding | None,
    ):
        self.client = client
        self.settings = settings
        self.manifest = manifest
        self.corpus = corpus
        self.topic_map = topic_map
        # Counted here, from the paper table: a Milvus collection stores no word counts.
        self.lexicon = Lexicon.count(corpus.papers, (s.text for p in corpus.papers for s in split_sentences(p)))
        self.embedder = embedder
        self.multilingual_embedder = multilingual_embedder
        self.names = Names(settings.store.milvus_collection, manifest["generation"])

    @property
    def version(self) -> str:
        return self.manifest["version"]

    @property
    def chunks(self) -> int:
        return self.manifest["chunks"]

    @property
    def path(self) -> str:
        """Where the index is, for logs and reports (a FAISS build's is its folder)."""
        return f"{self.settings.milvus_address}#{self.names.of('*')}@{self.version}"

    def is_current(self) -> bool:
        latest = self._read(lambda: read_meta(self.client, self.names.base))
        return latest is None or latest.get("version") == self.version

    def _read(self, request):
        """A read, retried once after what a Milvus restart leaves: a dead connection (gRPC
        waits out its reconnect backoff, so a new one is made) and released collections."""
        from pymilvus.exceptions import MilvusException

        with milvus_errors(self.settings):
            try:
                return request()
            except MilvusException as exc:
                if exc.code not in (NOT_LOADED, UNREACHABLE):
                    raise
                if exc.code == UNREACHABLE:
                    self.client.close()
                    self.client = connect(self.settings)
                loaded(self.client, self.names.meta, *(self.names.of(table) for table in TABLES))
                return request()

    def _search(self, data, field_name: str, k: int, within: Collection[str] | None) -> list[Ranked]:
        """`within`: Milvus filters by paper id itself, dense and BM25 searches alike."""
        found = self._read(
            lambda: self.client.search(
                self.names.of("chunks"),
                data=[data],
                anns_field=field_name,
                limit=k,
                filter="" if within is None else id_filter(within),
                output_fields=["paper_id"],
            )
        )
        return [Ranked(hit["entity"]["paper_id"], float(hit["distance"])) for hit in found[0]]

    def dense_ranking(self, vector, k: int, multilingual: bool, within: Collection[str] | None = None) -> list[Ranked]:
        return self._search(
            np.asarray(vector, dtype=np.float32).tolist(), "multilingual" if multilingual else "dense", k, within
        )

    def bm25_ranking(self, query: str, k: int, within: Collection[str] | None = None) -> list[Ranked]:
        (words,) = bm25_words([query])
        if not words:
            return []
        # Milvus Lite reports a BM25 match as a negative distance; a server as a positive score.
        return [Ranked(pid, abs(score)) for pid, score in self._search(words, "sparse", k, within)]

    def sentences_of(self, paper_ids: Iterable[str]) -> dict[str, SentenceRows]:
        """From Milvus, and kept: a paper's id is the hash of its text, so within a generation
        (one model, one chunking) its sentences never change; a replica keeps the recent ones."""
        wanted = list(dict.fromkeys(paper_ids))
        out = {pid: rows for pid in wanted if (rows := _SENTENCES.get((self.names.generation, pid))) is not None}
        ids = [pid for pid in wanted if pid not in out]
        if not ids:
            return out
        fields = ["paper_id", "position", "text", "dense"] + (["multilingual"] if self.multilingual_embedder else [])
        rows = self._read(
            lambda: self.client.query(
                self.names.of("sentences"), filter=id_filter(ids), output_fields=fields, limit=16384
            )
        )
        by_paper: dict[str, list[dict]] = {pid: [] for pid in ids}
        for row in rows:
            by_paper[row["paper_id"]].append(row)
        for pid, found in by_paper.items():
            found.sort(key=lambda r: r["position"])
            dense = np.asarray([r["dense"] for r in found], dtype=np.float32).reshape(len(found), -1)
            multilingual = (
                np.asarray([r["multilingual"] for r in found], dtype=np.float32).reshape(len(found), -1)
                if self.multilingual_embedder
                else None
            )
            out[pid] = SentenceRows([r["text"] for r in found], dense, multilingual)
            _SENTENCES.put((self.names.generation, pid), out[pid])
        return {pid: out[pid] for pid in wanted}


def load(settings: Settings, check: bool = True) -> MilvusIndex:
    """Connect and read the current generation's paper table (no file of the replica is read).
    `check`: refuse a collection built with another model or chunking (IndexStaleError)."""
    client = connect(settings)
    with milvus_errors(settings):
        if client.has_collection(f"{settings.store.milvus_collection}_meta"):
            loaded(client, f"{settings.store.milvus_collection}_meta")
        manifest = current_meta(client, settings)
        if check:
            check_parameters(manifest, settings, f"the Milvus collection {settings.store.milvus_collection}")
        names = Names(settings.store.milvus_collection, manifest["generation"])
        loaded(client, *(names.of(table) for table in TABLES))
        papers, places = load_papers(client, names)
        corpus = Corpus(papers, manifest.get("paragraphs", 0))
        topic_map = TopicMap(places, [Topic(**t) for t in manifest.get("topics", [])])
    multilingual = multilingual_encoder(settings) if settings.indexing.multilingual else None
    # Questions through the int8 (or fp32) ONNX encoder, as on the FAISS path; an add embeds
    # its papers with the fp32 export (base.document_encoder).
    embedder = question_encoder(settings)
    return MilvusIndex(client, settings, manifest, corpus, topic_map, embedder, multilingual)
