"""A FAISS build loaded from disk to answer from: the embedded default `SearchIndex`.

Files of a build (besides the manifest, rag/index/stores/faiss/folders.py):

    papers.json                   the papers the index holds
    dense/                        LlamaIndex storage: docstore + FAISS (English model)
    chunks.json                   the chunk and paper of each FAISS and BM25 row
    multilingual/                 the same for multilingual-e5 (when enabled)
    bm25/                         bm25s through LlamaIndex's BM25Retriever
    sentences.npz, sentences*.npy   sentence spans by paper and their vectors (snippets, answers)
    lexicon.json                  word counts over the papers and sentences (rag/index/lexicon.py)
    map.json                      each paper's place on the map and topic, the topics' labels (rag/index/topics.py)
    query_encoder.onnx            the English model exported to ONNX (documents), a link into models/
    query_encoder_int8.onnx       its int8 quantisation (questions, unless RAG_QUERY_ENCODER=fp32), ditto
"""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rag.common.errors import IndexCorruptError, IndexStaleError
from rag.common.settings import Settings
from rag.index.chunking import Sentence
from rag.index.corpus import Corpus, Paper
from rag.index.embedding import (
    QUERY_ENCODER,
    QUERY_ENCODER_INT8,
    configure_llama_index,
    load_query_embedder,
)
from rag.index.lexicon import Lexicon
from rag.index.stores.base import (
    REBUILD_HINT,
    Ranked,
    SentenceRows,
    check_parameters,
    multilingual_encoder,
    question_threads,
)
from rag.index.stores.faiss.folders import current_build, read_manifest, verify_checksums
from rag.index.stores.faiss.sentences import SENTENCES, SentenceTable
from rag.index.topics import TopicMap

LEXICON = "lexicon.json"
MAP = "map.json"

CHUNKS = "chunks.json"

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding
    from llama_index.retrievers.bm25 import BM25Retriever


@dataclass
class ChunkIndex:
    """A FAISS index of chunk vectors as LlamaIndex persisted it, and which chunk (and paper)
    each of its rows is. A question needs only row -> paper: reading LlamaIndex's docstore and
    index store to get there cost a replica 34 s at start and most of its 3.9 GB at 100,000
    papers (bench/scale.py --search), so they are written at build time and not read here."""

    faiss: Any
    chunk_ids: list[str]
    paper_ids: list[str]

    def search(self, vector, k: int, within: Collection[str] | None = None) -> list[Ranked]:
        query = np.asarray(vector, dtype=np.float32).reshape(1, -1)
        if within is None:
            scores, rows = self.faiss.search(query, k)
        else:
            import faiss

            # FAISS's own filter (an IDSelector of the papers' rows) on the exact vectors: an HNSW
            # index's filtered search only looks near the query and would miss a chosen paper far
            # from it, so its flat storage is searched instead (the scope's rows are few).
            kept = self.rows_of(within)
            if not kept:
                return []
            exact = faiss.downcast_index(self.faiss.storage) if isinstance(self.faiss, faiss.IndexHNSW) else self.faiss
            selector = faiss.IDSelectorBatch(np.asarray(kept, dtype=np.int64))
            params = faiss.SearchParameters()
            params.sel = selector  # SWIG keeps no reference: `selector` holds it until the search is done
            scores, rows = exact.search(query, min(k, len(kept)), params=params)
        return [Ranked(self.paper_ids[r], float(s)) for r, s in zip(rows[0], scores[0], strict=True) if r >= 0]

    def rows_of(self, paper_ids: Collection[str]) -> list[int]:
        """The rows of these papers' chunks (the same rows in BM25)."""
        return [row for pid in paper_ids for row in self._paper_rows.get(pid, ())]

    @cached_property
    def _paper_rows(self) -> dict[str, list[int]]:
        rows: dict[str, list[int]] = {}
        for row, pid in enumerate(self.paper_ids):
            rows.setdefault(pid, []).append(row)
        return rows

    def vectors(self) -> dict[str, np.ndarray]:
        """Every chunk's vector, by chunk id (flat and HNSW both reconstruct)."""
        return dict(zip(self.chunk_ids, self.faiss.reconstruct_n(0, self.faiss.ntotal), strict=True))

    def vectors_of(self, chunk_ids: Iterable[str]) -> dict[str, np.ndarray]:
        """The vectors of those of `chunk_ids` this index holds."""
        return {cid: self.faiss.reconstruct(self._rows[cid]) for cid in chunk_ids if cid in self._rows}

    @cached_property
    def _rows(self) -> dict[str, int]:
        return {cid: row for row, cid in enumerate(self.chunk_ids)}


@dataclass
class LoadedIndex:
    """A FAISS build loaded from disk."""

    path: Path
    manifest: dict
    corpus: Corpus
    lexicon: Lexicon
    topic_map: TopicMap
    dense: ChunkIndex
    bm25: BM25Retriever  # its bm25s model, read without the corpus it was saved with
    multilingual: ChunkIndex | None
    sentence_table: SentenceTable
    sentence_vectors: np.ndarray
    multilingual_sentence_vectors: np.ndarray | None
    embedder: BaseEmbedding
    multilingual_embedder: BaseEmbedding | None
    store: str = "faiss"

    @property
    def version(self) -> str:
        return self.path.name

    @property
    def chunks(self) -> int:
        return self.manifest["chunks"]

    def is_current(self) -> bool:
        return (self.path.parent.parent / "current").resolve() == self.path

    @property
    def sentences(self) -> list[Sentence]:
        """Every sentence, in row order (made from the table: for a catch-up, not for questions)."""
        return self.sentence_table.sentences(self.corpus.papers)

    def dense_ranking(self, vector, k: int, multilingual: bool, within: Collection[str] | None = None) -> list[Ranked]:
        index = self.multilingual if multilingual and self.multilingual is not None else self.dense
        return index.search(vector, k, within)

    def bm25_ranking(self, query: str, k: int, within: Collection[str] | None = None) -> list[Ranked]:
        """What LlamaIndex's BM25Retriever.retrieve does, with the row's paper id in place of
        the node it would rebuild from the saved corpus; `within` through bm25s's weight mask."""
        import bm25s

        r = self.bm25
        tokens = bm25s.tokenize(
            query, stemmer=None if r.skip_stemming else r.stemmer, token_pattern=r.token_pattern, show_progress=False
        )
        mask = None
        if within is not None:
            mask = np.zeros(self.chunks, dtype=np.float32)
            mask[self.dense.rows_of(within)] = 1.0
        rows, scores = r.bm25.retrieve(tokens, k=min(k, self.chunks), show_progress=False, weight_mask=mask)
        return [
            Ranked(self.dense.paper_ids[int(i)], float(s))
            for i, s in zip(rows[0], scores[0], strict=True)
            if mask is None or mask[int(i)]  # a masked row scores 0 but still fills the k
        ]

    def sentences_of(self, paper_ids: Iterable[str]) -> dict[str, SentenceRows]:
        out = {}
        multilingual = self.multilingual_sentence_vectors
        for pid in paper_ids:
            rows = self.sentence_table.rows.get(pid, slice(0, 0))
            out[pid] = SentenceRows(
                self.sentence_table.texts(paper) if (paper := self.corpus.get(pid)) else [],
                self.sentence_vectors[rows],
                None if multilingual is None else multilingual[rows],
            )
        return out


def _load_chunks(directory: Path, chunks: dict) -> ChunkIndex:
    from llama_index.vector_stores.faiss import FaissVectorStore

    index = FaissVectorStore.from_persist_dir(str(directory)).client
    if index.ntotal != len(chunks["ids"]):
        raise ValueError(f"{directory}: {index.ntotal} vectors for {len(chunks['ids'])} chunks")
    return ChunkIndex(index, chunks["ids"], chunks["papers"])


def _load_bm25(directory: Path) -> BM25Retriever:
    import bm25s
    from llama_index.retrievers.bm25 import BM25Retriever

    saved = json.loads((directory / "retriever.json").read_text())
    return BM25Retriever(existing_bm25=bm25s.BM25.load(str(directory), load_corpus=False, mmap=True), **saved)


def load_index(settings: Settings, corpus: Corpus | None = None, check: bool = True) -> LoadedIndex:
    """Load the current build; with `corpus`, also check that it was built from it. The files'
    checksums are verified on a second thread while the first reads them."""
    import faiss

    # One query per request: splitting it over both cores makes each query wait for a busy
    # core under load (bench/faiss_scale.py: 16 ms instead of 0.26 ms at 10k vectors).
    faiss.omp_set_num_threads(1)
    build = current_build(settings)
    manifest = read_manifest(build, verify=False)
    if check:
        check_parameters(manifest, settings)
    if corpus is not None and manifest.get("corpus_hash") != corpus.content_hash:
        raise IndexStaleError(f"the seed files changed since the index was built; {REBUILD_HINT}")
    with ThreadPoolExecutor(1) as pool:
        verified = pool.submit(verify_checksums, build, manifest)
        try:
            loaded = _read(build, manifest, settings)
        except (OSError, ValueError, KeyError, RuntimeError) as exc:
            _verified(verified, build)  # a damaged file is named as such rather than by its symptom
            raise IndexCorruptError(f"{build}: cannot be loaded ({exc}); {REBUILD_HINT}") from exc
        _verified(verified, build)
    return loaded


def _verified(future, build: Path) -> None:
    try:
        future.result()
    except OSError as exc:
        raise IndexCorruptError(f"{build}: cannot be read ({exc}); {REBUILD_HINT}") from exc


def _read(build: Path, manifest: dict, settings: Settings) -> LoadedIndex:
    stored = json.loads((build / "papers.json").read_text())
    papers = [Paper(**p) for p in stored["papers"]]
    files = manifest.get("files", {})
    encoder = (
        QUERY_ENCODER_INT8
        if settings.indexing.query_encoder == "int8" and QUERY_ENCODER_INT8 in files
        else QUERY_ENCODER
    )
    digest = files.get(encoder, {}).get("sha256")
    embedder = load_query_embedder(
        build / encoder, settings.indexing.embedding_model, digest, question_threads(settings)
    )
    configure_llama_index(embedder)
    chunks = json.loads((build / CHUNKS).read_text())
    multilingual = multilingual_vectors = multilingual_embedder = None
    if settings.indexing.multilingual:
        multilingual_embedder = multilingual_encoder(settings)
        multilingual = _load_chunks(build / "multilingual", chunks)
        multilingual_vectors = np.load(build / "sentences_multilingual.npy", mmap_mode="r")
    return LoadedIndex(
        path=build,
        manifest=manifest,
        corpus=Corpus(papers, stored.get("paragraphs", len(papers))),
        lexicon=Lexicon.load(build / LEXICON),
        topic_map=TopicMap.load(build / MAP, [p.paper_id for p in papers]),
        dense=_load_chunks(build / "dense", chunks),
        bm25=_load_bm25(build / "bm25"),
        multilingual=multilingual,
        sentence_table=SentenceTable.load(build / SENTENCES, papers),
        # Memory-mapped: only the rows of the papers a question retrieves are ever read (1.1 GB
        # for each encoder at 100,000 papers).
        sentence_vectors=np.load(build / "sentences.npy", mmap_mode="r"),
        multilingual_sentence_vectors=multilingual_vectors,
        embedder=embedder,
        multilingual_embedder=multilingual_embedder,
    )
