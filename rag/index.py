"""Chunks -> the persisted index: FAISS vectors (through LlamaIndex), BM25, sentence vectors.

Layout under `index_dir`:

    current -> builds/<id>        a symlink, replaced atomically when a build completes
    builds/<id>/manifest.json     what was built from what, and a checksum of every file
    builds/<id>/papers.json       the papers the index holds
    builds/<id>/dense/            LlamaIndex storage: docstore + FAISS (English model)
    builds/<id>/multilingual/     the same for multilingual-e5 (when enabled)
    builds/<id>/bm25/             bm25s through LlamaIndex's BM25Retriever
    builds/<id>/sentences.*       sentences and their vectors, for snippets and answers

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
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from .chunking import Sentence, chunk_papers, split_sentences
from .config import Settings
from .corpus import Corpus, Paper, build_corpus, load_corpus, parse_seed
from .embedding import (
    MULTILINGUAL_MODEL,
    QUERY_ENCODER,
    configure_llama_index,
    export_query_encoder,
    load_embedder,
    load_multilingual_embedder,
    load_query_embedder,
    tokenizer_of,
)
from .errors import IndexCorruptError, IndexNotFoundError, IndexStaleError, IndexWriteError

FORMAT_VERSION = 1
REBUILD_HINT = "run `rag index` to rebuild it"


@dataclass
class LoadedIndex:
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

    @property
    def chunks(self) -> int:
        return self.manifest["chunks"]


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


def _build_vector_index(nodes, embed_model, directory: Path, show_progress: bool, faiss_index):
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore

    store = FaissVectorStore(faiss_index=faiss_index)
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex(
        nodes, storage_context=context, embed_model=embed_model, show_progress=show_progress
    )
    context.persist(persist_dir=str(directory))
    return index


def _load_vector_index(directory: Path, embed_model):
    from llama_index.core import StorageContext, load_index_from_storage
    from llama_index.vector_stores.faiss import FaissVectorStore

    store = FaissVectorStore.from_persist_dir(str(directory))
    context = StorageContext.from_defaults(vector_store=store, persist_dir=str(directory))
    return load_index_from_storage(context, embed_model=embed_model)


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _file_table(directory: Path) -> dict:
    return {
        str(p.relative_to(directory)): {"size": p.stat().st_size, "sha256": _sha256(p)}
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != "manifest.json"
    }


def _embed_sentences(embed_model, sentences: list[Sentence], show_progress: bool) -> np.ndarray:
    vectors = embed_model.get_text_embedding_batch([s.text for s in sentences], show_progress=show_progress)
    return np.asarray(vectors, dtype=np.float32)


def build_index(corpus: Corpus, settings: Settings, show_progress: bool = False) -> Path:
    """Build the whole index from `corpus` and publish it atomically; returns its directory.
    Takes no lock: to build from the seed folder while adds may run, use `index_seeds`."""
    started = time.perf_counter()
    root = Path(settings.index_dir)
    with _writing(root), _staging(root) as work:
        embedder = load_embedder(settings.embedding_model)
        configure_llama_index(embedder)
        nodes = chunk_papers(
            corpus.papers, embedder._model.tokenizer.tokenize, settings.chunk_size, settings.chunk_overlap
        )
        sentences = [s for paper in corpus.papers for s in split_sentences(paper)]

        kind = faiss_kind(settings, len(nodes))
        dimensions = len(embedder.get_text_embedding("dimension probe"))
        _build_vector_index(nodes, embedder, work / "dense", show_progress,
                            make_faiss_index(dimensions, kind, settings))
        np.save(work / "sentences.npy", _embed_sentences(embedder, sentences, show_progress))
        query_encoder = export_query_encoder(embedder, work / QUERY_ENCODER)
        if settings.multilingual:
            multilingual = load_multilingual_embedder()
            _build_vector_index(nodes, multilingual, work / "multilingual", show_progress,
                                make_faiss_index(len(multilingual.get_text_embedding("probe")), kind, settings))
            np.save(work / "sentences_multilingual.npy", _embed_sentences(multilingual, sentences, False))
        manifest = {
            **expected_parameters(settings),
            **_write_contents(work, corpus, nodes, sentences, settings),
            "dimensions": dimensions,
            "faiss_index": kind,
            "query_encoder": "onnx" if query_encoder else "sentence-transformers",
            "build_seconds": round(time.perf_counter() - started, 2),
        }
        final = _seal(work, manifest)
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
def _staging(root: Path, source: Path | None = None):
    """A temporary build directory (a copy of `source` when given), removed if anything fails:
    builds/.tmp-* never loads, so a crash leaves the current build serving."""
    builds = root / "builds"
    builds.mkdir(parents=True, exist_ok=True)
    work = builds / f".tmp-{uuid.uuid4().hex[:8]}"
    try:
        if source is None:
            work.mkdir()
        else:
            shutil.copytree(source, work)
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
        "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def _write_tables(work: Path, corpus: Corpus, sentences: list[Sentence]) -> None:
    (work / "sentences.json").write_text(
        json.dumps([[s.paper_id, s.text, list(s.span)] for s in sentences], ensure_ascii=False)
    )
    (work / "papers.json").write_text(
        json.dumps({"paragraphs": corpus.paragraphs, "papers": [p.to_dict() for p in corpus.papers]},
                   ensure_ascii=False, indent=1)
    )


def _seal(work: Path, manifest: dict) -> Path:
    """Write the manifest last (a directory without one never loads), then give the build its
    final name; `_publish` makes it current."""
    manifest["files"] = _file_table(work)
    (work / "manifest.json").write_text(json.dumps(manifest, indent=2))
    final = work.parent / f"{datetime.now(timezone.utc):%Y%m%dT%H%M%S}-{manifest['corpus_hash'][:8]}-{uuid.uuid4().hex[:4]}"
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
        embedder = load_query_embedder(build, settings.embedding_model, digest)
        configure_llama_index(embedder)
        dense = _load_vector_index(build / "dense", embedder)
        bm25 = BM25Retriever.from_persist_dir(str(build / "bm25"))
        sentences = [Sentence(pid, text, tuple(span)) for pid, text, span in json.loads((build / "sentences.json").read_text())]
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


def stale_reason(settings: Settings, corpus: Corpus) -> str | None:
    """Why the current index cannot serve `corpus` under `settings`, or None when it can."""
    try:
        check_manifest(read_manifest(current_build(settings)), settings, corpus)
    except (IndexNotFoundError, IndexStaleError, IndexCorruptError) as exc:
        return str(exc)
    return None


@contextmanager
def one_writer(root: Path):
    """Builds from the seeds and adds of one index take turns, across processes: a rebuild
    reads the seed folder either before an add writes its file or after the add published,
    so it never publishes a build without papers that were added."""
    root.mkdir(parents=True, exist_ok=True)
    with open(root / ".writer.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def index_seeds(settings: Settings, show_progress: bool = False, only_if_stale: bool = False) -> tuple[Path | None, str | None]:
    """Build the index from the seed folder, read under the writer lock; with `only_if_stale`,
    only when the current index cannot serve it. Returns (the new build or None, why it was built)."""
    root = Path(settings.index_dir)
    with _writing(root), one_writer(root):
        corpus = load_corpus(settings.seeds_dir)
        reason = stale_reason(settings, corpus)
        if only_if_stale and reason is None:
            return None, None
        return build_index(corpus, settings, show_progress), reason


def ensure_index(settings: Settings, corpus: Corpus, show_progress: bool = False) -> tuple[LoadedIndex, bool]:
    """Load the index, building it first when it is missing, stale or damaged."""
    built = stale_reason(settings, corpus) is not None
    if built:
        build_index(corpus, settings, show_progress=show_progress)
    return load_index(settings, corpus), built


@dataclass
class AddResult:
    build: Path | None  # the new build, None when nothing was new
    added: list[Paper]
    duplicates: list[Paper]


def add_papers(settings: Settings, new: Corpus, files: dict[str, str]) -> AddResult:
    """Add the papers of `new` that the index lacks, embedding only them, and publish the result
    atomically. The previous build is copied, never modified: a crash mid-add loses nothing.

    `files` (name -> seed-format text, the source of `new`) are written into the seeds folder
    first when anything is new, so the seeds stay the corpus of record: a later `rag index`
    rebuilds the same papers, and a crash between the two only costs a rebuild."""
    root = Path(settings.index_dir)
    with _writing(root), one_writer(root):
        return _add_papers_locked(settings, new, files)


def _add_papers_locked(settings: Settings, new: Corpus, files: dict[str, str]) -> AddResult:
    loaded = load_index(settings)
    fresh = [p for p in new.papers if loaded.corpus.get(p.paper_id) is None]
    duplicates = [p for p in new.papers if loaded.corpus.get(p.paper_id) is not None]
    if not fresh:
        return AddResult(None, [], duplicates)
    for name, text in files.items():
        (Path(settings.seeds_dir) / name).write_text(text, encoding="utf-8")
    with _staging(Path(settings.index_dir), source=loaded.path) as work:
        nodes = chunk_papers(fresh, tokenizer_of(loaded.embedder), settings.chunk_size, settings.chunk_overlap)
        sentences = [s for paper in fresh for s in split_sentences(paper)]
        loaded.dense.insert_nodes(nodes)
        loaded.dense.storage_context.persist(persist_dir=str(work / "dense"))
        vectors = np.vstack([loaded.sentence_vectors, _embed_sentences(loaded.embedder, sentences, False)])
        np.save(work / "sentences.npy", vectors)
        if loaded.multilingual is not None:
            loaded.multilingual.insert_nodes(nodes)
            loaded.multilingual.storage_context.persist(persist_dir=str(work / "multilingual"))
            vectors = np.vstack([loaded.multilingual_sentence_vectors,
                                 _embed_sentences(loaded.multilingual_embedder, sentences, False)])
            np.save(work / "sentences_multilingual.npy", vectors)
        # bm25s cannot add documents; re-indexing every chunk's words takes milliseconds.
        shutil.rmtree(work / "bm25")
        merged = Corpus(loaded.corpus.papers + fresh, loaded.corpus.paragraphs + new.paragraphs)
        manifest = {
            **loaded.manifest,
            **_write_contents(work, merged, list(loaded.dense.docstore.docs.values()),
                              loaded.sentences + sentences, settings),
            "added": loaded.manifest.get("added", 0) + len(fresh),
        }
        final = _seal(work, manifest)
    _publish(Path(settings.index_dir), final)
    return AddResult(final, fresh, duplicates)


def add_seed_texts(settings: Settings, items: list[tuple[str, bytes]]) -> AddResult:
    """(file name, seed-format bytes) pairs -> `add_papers`; each is kept in the seeds folder
    under a fresh name (added-<time>-<name>.txt) so it never overwrites a seed file."""
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%S")
    parsed, files = [], {}
    for name, raw in items:
        stem = re.sub(r"[^\w.-]", "_", Path(name).stem)[:60] or "papers"
        seed_name = f"added-{stamp}-{uuid.uuid4().hex[:4]}-{stem}.txt"
        parsed.append((seed_name, parse_seed(raw, name)))
        files[seed_name] = raw.decode("utf-8-sig")
    return add_papers(settings, build_corpus(parsed), files)
