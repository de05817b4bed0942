"""Chunks -> the persisted index: FAISS vectors (through LlamaIndex), BM25, sentence vectors.

Layout under `index_dir`:

    current -> builds/<id>        a symlink, replaced atomically when a build completes
    builds/<id>/manifest.json     what was built from what, and a checksum of every file
    builds/<id>/papers.json       the papers the index holds
    builds/<id>/dense/            LlamaIndex storage: docstore + FAISS (English model)
    builds/<id>/multilingual/     the same for multilingual-e5 (when enabled)
    builds/<id>/bm25/             bm25s through LlamaIndex's BM25Retriever
    builds/<id>/sentences.*       sentences and their vectors, for snippets and answers
    builds/<id>/query_encoder.onnx   the English model exported to ONNX, a link to:
    models/<model>-<version>.onnx    the export, made by the first build (a model cache)

A build writes into a temporary directory and only then moves `current`, so a crash
mid-build leaves the previous index serving and no half index that loads.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import time
import uuid
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cached_property
from pathlib import Path
from typing import Protocol

import numpy as np

from .chunking import Sentence, chunk_papers, split_sentences
from .config import Settings
from .corpus import Corpus, Paper, build_corpus, file_hash, load_corpus, parse_seed, seed_files
from .embedding import (
    MULTILINGUAL_MODEL,
    QUERY_ENCODER,
    cached_encoder_path,
    cached_query_encoder,
    configure_llama_index,
    document_embedder,
    file_digest,
    load_multilingual_embedder,
    load_query_embedder,
    tokenizer_of,
)
from .errors import IndexCorruptError, IndexNotFoundError, IndexStaleError, IndexWriteError

FORMAT_VERSION = 1
REBUILD_HINT = "run `rag index` to rebuild it"


@dataclass(frozen=True)
class SentenceRows:
    """One paper's sentences, in order, and their vectors under each encoder (row i is sentence i)."""

    texts: list[str]
    vectors: np.ndarray
    multilingual: np.ndarray | None


class SearchIndex(Protocol):
    """What retrieval and answers read from an index, whichever store holds it: the FAISS
    build on local disk (`LoadedIndex`) or a Milvus collection (`rag.milvus_index`)."""

    store: str  # "faiss" or "milvus", for /health
    manifest: dict  # parameters (model, chunking) and counts of what was built
    corpus: Corpus
    embedder: object
    multilingual_embedder: object | None

    @property
    def version(self) -> str:
        """Names this state of the index: it changes when a build or an add is published."""

    @property
    def chunks(self) -> int: ...

    def is_current(self) -> bool:
        """False once another process published a newer state (the service then reloads)."""

    def dense_ranking(self, vector, k: int, multilingual: bool) -> list[tuple[str, float]]:
        """The k chunks closest to `vector` as (paper_id, cosine), best first."""

    def bm25_ranking(self, query: str, k: int) -> list[tuple[str, float]]:
        """The k chunks that best match `query`'s words as (paper_id, BM25 score), best first."""

    def sentences_of(self, paper_ids: Iterable[str]) -> dict[str, SentenceRows]:
        """Each paper's sentences and their vectors."""

    def sentence_texts(self) -> list[str]:
        """Every sentence of the corpus (the extractive scorer's word statistics)."""


@dataclass
class LoadedIndex:
    """A FAISS build loaded from disk: the embedded default store."""

    path: Path
    manifest: dict
    corpus: Corpus
    dense: object  # llama_index VectorStoreIndex
    bm25: object  # llama_index BM25Retriever
    multilingual: object | None
    sentences: list[Sentence]
    sentence_vectors: np.ndarray
    multilingual_sentence_vectors: np.ndarray | None
    embedder: object
    multilingual_embedder: object | None
    store: str = "faiss"

    @property
    def version(self) -> str:
        return self.path.name

    @property
    def chunks(self) -> int:
        return self.manifest["chunks"]

    def is_current(self) -> bool:
        return (self.path.parent.parent / "current").resolve() == self.path

    @cached_property
    def _rows(self) -> dict[str, list[int]]:
        rows: dict[str, list[int]] = {}
        for row, sentence in enumerate(self.sentences):
            rows.setdefault(sentence.paper_id, []).append(row)
        return rows

    def dense_ranking(self, vector, k: int, multilingual: bool) -> list[tuple[str, float]]:
        from llama_index.core.schema import QueryBundle

        retriever = (self.multilingual if multilingual else self.dense).as_retriever(similarity_top_k=k)
        nodes = retriever.retrieve(QueryBundle("", embedding=list(vector)))
        return [(n.node.metadata["paper_id"], float(n.score or 0.0)) for n in nodes]

    def bm25_ranking(self, query: str, k: int) -> list[tuple[str, float]]:
        from llama_index.core.schema import QueryBundle

        self.bm25.similarity_top_k = min(k, self.chunks)
        return [(n.node.metadata["paper_id"], float(n.score or 0.0)) for n in self.bm25.retrieve(QueryBundle(query))]

    def sentences_of(self, paper_ids: Iterable[str]) -> dict[str, SentenceRows]:
        out = {}
        for pid in paper_ids:
            rows = self._rows.get(pid, [])
            multilingual = self.multilingual_sentence_vectors
            out[pid] = SentenceRows(
                [self.sentences[r].text for r in rows],
                self.sentence_vectors[rows],
                None if multilingual is None else multilingual[rows],
            )
        return out

    def sentence_texts(self) -> list[str]:
        return [s.text for s in self.sentences]


def expected_parameters(settings: Settings) -> dict:
    """What a manifest must record for the index to be usable under these settings."""
    return {
        "format": FORMAT_VERSION,
        "embedding_model": settings.embedding_model,
        "multilingual_model": MULTILINGUAL_MODEL if settings.multilingual else None,
        "chunk_size": settings.chunk_size,
        "chunk_overlap": settings.chunk_overlap,
    }


def faiss_kind(settings: Settings, vectors: int) -> str:
    """Exact search below `hnsw_above` vectors, HNSW above (bench/faiss_scale.py: flat costs
    0.26 ms a query at 10k vectors but 7.5 ms at 100k and 56 ms at 1M; HNSW stays under 1 ms)."""
    if settings.faiss_index != "auto":
        return settings.faiss_index
    return "hnsw" if vectors >= settings.hnsw_above else "flat"


def make_faiss_index(dimensions: int, kind: str, settings: Settings):
    """Inner-product search (vectors are normalised, so scores are cosines)."""
    import faiss

    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dimensions, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 64
        index.hnsw.efSearch = settings.hnsw_ef_search
        return index
    return faiss.IndexFlatIP(dimensions)


def _build_vector_index(
    nodes, embed_model, directory: Path, show_progress: bool, faiss_index, known: dict[str, np.ndarray] | None = None
):
    """Embed and store `nodes`; a node whose vector `known` holds (by node id) is not embedded again."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore

    known = known or {}
    nodes = [n.model_copy(update={"embedding": known[n.id_].tolist()}) if n.id_ in known else n for n in nodes]
    store = FaissVectorStore(faiss_index=faiss_index)
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed_model, show_progress=show_progress)
    context.persist(persist_dir=str(directory))
    return index


def _load_vector_index(directory: Path, embed_model):
    from llama_index.core import StorageContext, load_index_from_storage
    from llama_index.vector_stores.faiss import FaissVectorStore

    store = FaissVectorStore.from_persist_dir(str(directory))
    context = StorageContext.from_defaults(vector_store=store, persist_dir=str(directory))
    return load_index_from_storage(context, embed_model=embed_model)


def exported_encoder(settings: Settings) -> Path:
    """The ONNX export of the English model in the index folder's model cache (not index data:
    exported once, then linked into each build and used by stores that keep no build folder)."""
    return cached_encoder_path(Path(settings.index_dir) / "models", settings.embedding_model)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_table(directory: Path, known: dict | None = None) -> dict:
    """Size and checksum of every file; `known` entries (the linked ONNX export, whose checksum
    the build already has) are taken as they are rather than hashed again (it is 90 MB)."""
    known = known or {}
    return {
        name: known.get(name) or {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and (name := str(p.relative_to(directory))) != "manifest.json"
    }


@dataclass
class KnownVectors:
    """The vectors a previous build holds, by chunk id and by sentence: a catch-up or an add
    embeds only what that build lacks."""

    chunks: dict[str, np.ndarray] = field(default_factory=dict)
    sentences: dict[Sentence, np.ndarray] = field(default_factory=dict)
    multilingual_chunks: dict[str, np.ndarray] = field(default_factory=dict)
    multilingual_sentences: dict[Sentence, np.ndarray] = field(default_factory=dict)

    @classmethod
    def of(cls, previous: LoadedIndex | None) -> KnownVectors:
        if previous is None:
            return cls()

        def chunks(index) -> dict[str, np.ndarray]:
            if index is None:
                return {}
            stored = index.vector_store.client  # the FAISS index; flat and HNSW both reconstruct
            vectors = stored.reconstruct_n(0, stored.ntotal)
            return {node_id: vectors[int(position)] for position, node_id in index.index_struct.nodes_dict.items()}

        def sentences(matrix) -> dict[Sentence, np.ndarray]:
            return {} if matrix is None else dict(zip(previous.sentences, matrix, strict=False))

        return cls(
            chunks(previous.dense),
            sentences(previous.sentence_vectors),
            chunks(previous.multilingual),
            sentences(previous.multilingual_sentence_vectors),
        )


def _embed_sentences(embed_model, sentences: list[Sentence], known: dict, show_progress: bool) -> np.ndarray:
    missing = [s for s in sentences if s not in known]
    if missing:
        vectors = embed_model.get_text_embedding_batch([s.text for s in missing], show_progress=show_progress)
        known = {**known, **dict(zip(missing, np.asarray(vectors, dtype=np.float32), strict=False))}
    return np.asarray([known[s] for s in sentences], dtype=np.float32).reshape(len(sentences), -1)


def _link_or_copy(source: Path, target: Path) -> None:
    """Builds are never modified, so a file they share can be one file on disk."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def pause_point(settings: Settings, stage: str) -> None:
    """For the crash tests: with RAG_PAUSE_AT=<stage>, stop here (and say so with a marker
    file in the index folder) until the test kills the process."""
    if settings.pause_at == stage:
        Path(settings.index_dir).mkdir(parents=True, exist_ok=True)
        (Path(settings.index_dir) / f".paused-{stage}").touch()
        while True:
            time.sleep(1)


def build_index(corpus: Corpus, settings: Settings, show_progress: bool = False, remote=None) -> Path:
    """Build the whole index from `corpus`, embedding everything, and publish it atomically;
    returns its directory. Takes no lock: to build from the seed folder while adds may run,
    use `index_seeds`."""
    return _build(corpus, settings, show_progress, previous=None, remote=remote)


def _build(corpus: Corpus, settings: Settings, show_progress: bool, previous: LoadedIndex | None, remote=None) -> Path:
    """Write a build of `corpus` and publish it. With `previous` (a build under the same model
    and chunking), its vectors are reused and only new chunks and sentences are embedded, by the
    encoder that build serves questions with (the model's own vectors, cosine > 0.9999): an add
    or a catch-up costs what is new, not the corpus. The result is what a full build gives,
    paper order included. `remote` (a `ray_embedding.RayEmbedding`) embeds on a Ray cluster
    instead of in this process."""
    started = time.perf_counter()
    root = Path(settings.index_dir)
    known = KnownVectors.of(previous)
    linked: dict = {}
    with _writing(root), _staging(root) as work:
        if previous is None:
            exported = exported_encoder(settings)
            embedder = cached_query_encoder(exported.parent, settings.embedding_model)
            multilingual = load_multilingual_embedder() if settings.multilingual else None
            query_encoder = exported.is_file()
            if query_encoder:
                _link_or_copy(exported, work / QUERY_ENCODER)
                linked = {QUERY_ENCODER: {"size": exported.stat().st_size, "sha256": file_digest(exported)}}
        else:
            embedder, multilingual = previous.embedder, previous.multilingual_embedder
            query_encoder = (previous.path / QUERY_ENCODER).is_file()
            if query_encoder:
                _link_or_copy(previous.path / QUERY_ENCODER, work / QUERY_ENCODER)
                linked = {QUERY_ENCODER: previous.manifest["files"][QUERY_ENCODER]}
        # A full build: the exported encoder embeds the documents too, in batches on every core.
        # A catch-up or an add (often inside the service): the build's own question encoder, as
        # before, with no second model in memory.
        documents = (
            embedder
            if previous is not None
            else document_embedder(work / QUERY_ENCODER, settings.embedding_model, embedder)
        )
        configure_llama_index(embedder)
        nodes = chunk_papers(corpus.papers, tokenizer_of(embedder), settings.chunk_size, settings.chunk_overlap)
        sentences = [s for paper in corpus.papers for s in split_sentences(paper)]
        embedded = {
            "chunks": sum(n.id_ not in known.chunks for n in nodes),
            "sentences": sum(s not in known.sentences for s in sentences),
        }
        if remote is not None:
            known = remote.vectors(nodes, sentences, settings, known, work / QUERY_ENCODER)

        kind = faiss_kind(settings, len(nodes))
        dimensions = len(documents.get_text_embedding("dimension probe"))
        _build_vector_index(
            nodes, documents, work / "dense", show_progress, make_faiss_index(dimensions, kind, settings), known.chunks
        )
        pause_point(settings, "embedding")
        np.save(work / "sentences.npy", _embed_sentences(documents, sentences, known.sentences, show_progress))
        if multilingual is not None:
            _build_vector_index(
                nodes,
                multilingual,
                work / "multilingual",
                show_progress,
                make_faiss_index(len(multilingual.get_text_embedding("probe")), kind, settings),
                known.multilingual_chunks,
            )
            np.save(
                work / "sentences_multilingual.npy",
                _embed_sentences(multilingual, sentences, known.multilingual_sentences, False),
            )
        manifest = {
            **expected_parameters(settings),
            **_write_contents(work, corpus, nodes, sentences, settings),
            "dimensions": dimensions,
            "faiss_index": kind,
            "query_encoder": "onnx" if query_encoder else "sentence-transformers",
            "seed_files": corpus.files,
            "built_from": previous.path.name if previous is not None else None,
            "embedded": embedded,
            "embedded_on": "ray" if remote is not None else "this process",
            "build_seconds": round(time.perf_counter() - started, 2),
        }
        pause_point(settings, "writing")
        final = _seal(work, manifest, linked)
    pause_point(settings, "before-publish")
    with _writing(root):
        _publish(root, final)
    return final


@contextmanager
def _writing(root: Path):
    """A write that fails (disk full, read-only folder, no permission) becomes one clear error;
    the build being written is dropped by `_staging` and the current one is left as it was."""
    try:
        yield
    except OSError as exc:
        where = exc.filename or root
        raise IndexWriteError(
            f"cannot write {where}: {exc.strerror or exc}; the current index is unchanged. "
            f"Free disk space or make {root} writable (or set RAG_INDEX_DIR to another folder), "
            f"then run `rag index` (or repeat the add)"
        ) from exc


@contextmanager
def _staging(root: Path):
    """A temporary build directory, removed if anything fails: builds/.tmp-* never loads, so a
    crash leaves the current build serving."""
    builds = root / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    work = builds / f".tmp-{uuid.uuid4().hex[:8]}"
    try:
        work.mkdir()
        yield work
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise


def _write_contents(work: Path, corpus: Corpus, nodes: list, sentences: list[Sentence], settings: Settings) -> dict:
    """BM25 over every chunk and the paper and sentence tables, for a build or an add; returns
    what the manifest records of them."""
    from llama_index.retrievers.bm25 import BM25Retriever

    BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=settings.candidates).persist(
        str(work / "bm25"), show_progress=False
    )
    _write_tables(work, corpus, sentences)
    return {
        "corpus_hash": corpus.content_hash,
        "papers": len(corpus),
        "chunks": len(nodes),
        "sentences": len(sentences),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _write_tables(work: Path, corpus: Corpus, sentences: list[Sentence]) -> None:
    (work / "sentences.json").write_text(
        json.dumps([[s.paper_id, s.text, list(s.span)] for s in sentences], ensure_ascii=False)
    )
    (work / "papers.json").write_text(
        json.dumps(
            {"paragraphs": corpus.paragraphs, "papers": [p.to_dict() for p in corpus.papers]},
            ensure_ascii=False,
            indent=1,
        )
    )


def _seal(work: Path, manifest: dict, linked: dict | None = None) -> Path:
    """Write the manifest last (a directory without one never loads), then give the build its
    final name; `_publish` makes it current."""
    manifest["files"] = _file_table(work, linked)
    (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
    final = work.parent / f"{datetime.now(UTC):%Y%m%dT%H%M%S}-{manifest['corpus_hash'][:8]}-{uuid.uuid4().hex[:4]}"
    work.rename(final)
    return final


def _publish(root: Path, build: Path) -> None:
    """Point `current` at `build` with one atomic rename, then drop all but the previous build."""
    link = root / "current"
    previous = link.resolve() if link.is_symlink() else None
    tmp_link = root / f".current-{uuid.uuid4().hex[:8]}"
    os.symlink(build.relative_to(root), tmp_link)
    os.replace(tmp_link, link)
    for old in (root / "builds").iterdir():
        if old != build and old != previous and not old.name.startswith(".tmp-"):
            shutil.rmtree(old, ignore_errors=True)


def current_build(settings: Settings) -> Path:
    link = Path(settings.index_dir) / "current"
    if not link.exists():
        raise IndexNotFoundError(f"no index at {settings.index_dir}: {REBUILD_HINT}")
    return link.resolve()


def read_manifest(build: Path, verify: bool = True) -> dict:
    """The build's manifest, after checking every file it lists against its size and checksum."""
    try:
        manifest = json.loads((build / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise IndexCorruptError(f"{build / 'manifest.json'}: unreadable ({exc}); {REBUILD_HINT}") from exc
    for name, meta in manifest.get("files", {}).items():
        path = build / name
        if not path.is_file():
            raise IndexCorruptError(f"{path}: missing; {REBUILD_HINT}")
        if path.stat().st_size != meta["size"] or (verify and _sha256(path) != meta["sha256"]):
            raise IndexCorruptError(f"{path}: truncated or modified since the build; {REBUILD_HINT}")
    return manifest


def check_manifest(manifest: dict, settings: Settings, corpus: Corpus | None) -> None:
    """Raise IndexStaleError when the index was built from another corpus, model or chunking."""
    for key, wanted in expected_parameters(settings).items():
        if manifest.get(key) != wanted:
            raise IndexStaleError(
                f"index was built with {key}={manifest.get(key)!r}, settings ask for {wanted!r}; {REBUILD_HINT}"
            )
    if corpus is not None and manifest.get("corpus_hash") != corpus.content_hash:
        raise IndexStaleError(f"the seed files changed since the index was built; {REBUILD_HINT}")


def load_index(settings: Settings, corpus: Corpus | None = None) -> LoadedIndex:
    """Load the current build; with `corpus`, also check that it was built from it."""
    from llama_index.retrievers.bm25 import BM25Retriever

    build = current_build(settings)
    manifest = read_manifest(build)
    check_manifest(manifest, settings, corpus)
    try:
        stored = json.loads((build / "papers.json").read_text())
        papers = [Paper(**p) for p in stored["papers"]]
        digest = manifest.get("files", {}).get(QUERY_ENCODER, {}).get("sha256")
        embedder = load_query_embedder(build / QUERY_ENCODER, settings.embedding_model, digest)
        configure_llama_index(embedder)
        dense = _load_vector_index(build / "dense", embedder)
        bm25 = BM25Retriever.from_persist_dir(str(build / "bm25"))
        sentences = [
            Sentence(pid, text, tuple(span)) for pid, text, span in json.loads((build / "sentences.json").read_text())
        ]
        sentence_vectors = np.load(build / "sentences.npy")
        multilingual = multilingual_vectors = multilingual_embedder = None
        if settings.multilingual:
            multilingual_embedder = load_multilingual_embedder()
            multilingual = _load_vector_index(build / "multilingual", multilingual_embedder)
            multilingual_vectors = np.load(build / "sentences_multilingual.npy")
    except (OSError, ValueError, KeyError, RuntimeError) as exc:
        raise IndexCorruptError(f"{build}: cannot be loaded ({exc}); {REBUILD_HINT}") from exc
    return LoadedIndex(
        path=build,
        manifest=manifest,
        corpus=Corpus(papers, stored.get("paragraphs", len(papers))),
        dense=dense,
        bm25=bm25,
        multilingual=multilingual,
        sentences=sentences,
        sentence_vectors=sentence_vectors,
        multilingual_sentence_vectors=multilingual_vectors,
        embedder=embedder,
        multilingual_embedder=multilingual_embedder,
    )


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


def seeds_changed(settings: Settings, manifest: dict) -> bool:
    """True when the seed folder's files are not the ones `manifest`'s build was made from
    (file checksums only: cheap enough to ask before every CLI answer)."""
    return manifest.get("seed_files") != seed_files(settings.seeds_dir)


@contextmanager
def one_writer(root: Path, wait: bool = True):
    """Builds from the seeds and adds of one index take turns, across processes: a rebuild
    reads the seed folder either before an add writes its file or after the add published,
    so it never publishes a build without papers that were added. Yields whether the lock is
    held (with `wait` False, False when another writer has it)."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".writer.lock", "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        yield True


PENDING = ".pending"


def _pending_path(seeds_dir: Path, name: str) -> Path:
    """Where an add keeps a seed file until its build is published: hidden, and not *.txt, so
    no reader takes it for part of the corpus."""
    return Path(seeds_dir) / f".{name}{PENDING}"


def recover(settings: Settings) -> None:
    """Finish or undo what a killed writer left; call it holding the writer lock.

    A pending seed file joins the seed folder when the current build lists it (its add
    published) and is deleted otherwise (the index never held it): the folder and the index
    agree again, each added abstract in both or in neither. Half-written builds are deleted."""
    root, seeds = Path(settings.index_dir), Path(settings.seeds_dir)
    for staged in (root / "builds").glob(".tmp-*"):
        shutil.rmtree(staged, ignore_errors=True)
    pending = sorted(seeds.glob(f".*{PENDING}"))
    if not pending:
        return
    try:
        listed = read_manifest(current_build(settings), verify=False).get("seed_files", {})
    except (IndexNotFoundError, IndexCorruptError):
        listed = {}
    for path in pending:
        name = path.name[1 : -len(PENDING)]
        if listed.get(name) == file_hash(path.read_bytes()):
            os.replace(path, seeds / name)
        else:
            path.unlink()


def open_index(settings: Settings) -> LoadedIndex:
    """Load the current build for a reader (the CLI, the service): first `recover` from writers
    that died, unless a writer is at work (then what it left is not dead) or the folders are
    read-only (then nobody can have left anything)."""
    root = Path(settings.index_dir)
    if root.is_dir() and Path(settings.seeds_dir).is_dir():
        try:
            with one_writer(root, wait=False) as held:
                if held:
                    recover(settings)
        except OSError:
            pass
    return load_index(settings)


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


def index_seeds(
    settings: Settings, show_progress: bool = False, only_if_stale: bool = False, remote=None
) -> IndexReport:
    """Bring the index in line with the seed folder, read under the writer lock.

    Without `only_if_stale` (`rag index`) everything is embedded again. With it (`rag index
    --if-needed`, the service at start) nothing happens when the index matches the folder, and
    otherwise only the difference is embedded or deleted; everything only when there is no
    usable build or the model or chunking changed."""
    started = time.perf_counter()
    root = Path(settings.index_dir)
    with _writing(root), one_writer(root):
        recover(settings)
        corpus = load_corpus(settings.seeds_dir)
        previous, reason = None, "a full rebuild was asked for"
        if only_if_stale:
            try:
                manifest = read_manifest(current_build(settings), verify=False)
                check_manifest(manifest, settings, corpus)
                if manifest.get("seed_files") == corpus.files:  # up to date: no model is loaded
                    read_manifest(current_build(settings))  # and undamaged (load_index checks otherwise)
                    return IndexReport(None, None, False, len(corpus), 0, 0, time.perf_counter() - started)
            except (IndexNotFoundError, IndexStaleError, IndexCorruptError):
                pass
            try:
                previous = load_index(settings)
            except (IndexNotFoundError, IndexStaleError, IndexCorruptError) as exc:
                reason = str(exc)
        added = removed = 0
        if previous is not None:
            changes = SeedChanges.between(previous.corpus, corpus)
            reason, added, removed = str(changes), len(changes.added), len(changes.removed)
        build = _build(corpus, settings, show_progress, previous, remote)
    chunks = json.loads((build / "manifest.json").read_text())["chunks"]
    return IndexReport(
        build, reason, previous is not None, len(corpus), added, removed, time.perf_counter() - started, chunks
    )


@dataclass
class AddResult:
    build: Path | None  # the new build, None when nothing was new
    added: list[Paper]
    duplicates: list[Paper]


def add_seed_texts(settings: Settings, items: list[tuple[str, bytes]]) -> AddResult:
    """Add the abstracts of (file name, seed-format bytes) pairs that the index lacks, embedding
    only what is new, and publish the result atomically; the previous build is never modified.

    Each file joins the seed folder (the corpus of record) under a fresh name,
    added-<time>-<name>.txt, atomically with the build: it waits hidden as `.<name>.pending`
    and is moved into place once the build that holds its papers is current. An add killed at
    any point leaves both the folder and the index with its abstracts, or neither
    (`recover` finishes or undoes it), and a retry adds each abstract once."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    files = {}
    for name, raw in items:
        parse_seed(raw, name)  # a clear error naming the file before anything is written
        stem = re.sub(r"[^\w.-]", "_", Path(name).stem)[:60] or "papers"
        files[f"added-{stamp}-{uuid.uuid4().hex[:4]}-{stem}.txt"] = raw
    root, seeds = Path(settings.index_dir), Path(settings.seeds_dir)
    with _writing(root), one_writer(root):
        recover(settings)
        previous = load_index(settings)
        new = build_corpus((name, parse_seed(raw, name)) for name, raw in files.items())
        fresh = [p for p in new.papers if previous.corpus.get(p.paper_id) is None]
        duplicates = [p for p in new.papers if previous.corpus.get(p.paper_id) is not None]
        if not fresh:
            return AddResult(None, [], duplicates)
        try:
            for name, raw in files.items():
                _pending_path(seeds, name).write_bytes(raw)
            pause_point(settings, "seed-written")
            build = _build(load_corpus(seeds, extra=files), settings, False, previous)
        except BaseException:
            for name in files:
                _pending_path(seeds, name).unlink(missing_ok=True)
            raise
        pause_point(settings, "after-publish")
        for name in files:
            os.replace(_pending_path(seeds, name), seeds / name)
    return AddResult(build, fresh, duplicates)
