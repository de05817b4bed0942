"""The index on Milvus: one store that service replicas on several machines share.

With `RAG_VECTOR_STORE=milvus` the papers, chunks and sentences live in Milvus (Milvus Lite in a
local file, or a server at `RAG_MILVUS_URI`), and a service replica holds no index files: it
reads the paper table at start, searches Milvus for every question, and follows what other
replicas add. The answering code is the FAISS path's (`SearchIndex` in rag/index.py); only
where the vectors are kept differs.

Collections, for `RAG_MILVUS_COLLECTION=icml_rag`:

    icml_rag_meta                 one row "current": the generation in use, a version that
                                  changes with every add, model and chunking parameters
    icml_rag_<gen>_chunks         chunk text, stemmed words (BM25 function), English and
                                  multilingual vectors
    icml_rag_<gen>_sentences      every sentence with its vectors
    icml_rag_<gen>_papers         the papers (the commit record of an add)

A full build writes a new generation and then points the meta row at it (the old generation
stays until the next build, for replicas still reading it). An add writes a paper's chunks and
sentences first and its paper row last: readers only see papers that have a row, so an add
killed at any point leaves each paper whole or absent, and a retry deletes what a dead attempt
left before writing the paper again (each abstract once).

Written with pymilvus directly rather than LlamaIndex's MilvusVectorStore: we need two dense
fields (MiniLM and multilingual-e5) and a BM25 function in one collection, the dense and BM25
rankings separately (our paper-level fusion weighs them per question and keeps the raw cosine
for abstention), a sentence table, and control of the write order that makes adds atomic.
"""

from __future__ import annotations

import contextlib
import json
import logging
import re
import threading
import time
import uuid
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path

import numpy as np

from .chunking import chunk_papers, split_sentences
from .config import Settings
from .corpus import Corpus, Paper, build_corpus, load_corpus, parse_seed
from .embedding import cached_query_encoder, document_embedder, load_multilingual_embedder, tokenizer_of
from .errors import IndexNotFoundError, IndexStaleError, StoreUnavailableError
from .index import (
    AddResult,
    IndexReport,
    KnownVectors,
    SeedChanges,
    SentenceRows,
    expected_parameters,
    exported_encoder,
    pause_point,
)

_BATCH = 1000  # rows per insert request
_TEXT = 65535  # the longest VARCHAR Milvus stores (bytes)
_NO_VECTOR = [0.0, 0.0]  # Milvus wants a vector field in every collection; papers and meta have none
_ADDED = "added-"
_GENERATION = re.compile(r"[0-9a-f]{8}")
_TABLES = ("chunks", "sentences", "papers")
_NOT_LOADED = 101  # Milvus' error code for a collection that is not loaded
_UNREACHABLE = 2  # pymilvus': the server cannot be reached


@lru_cache(maxsize=1)
def _bm25_words():
    import bm25s
    import Stemmer

    stemmer = Stemmer.Stemmer("english")
    return lambda texts: [
        " ".join(words)
        for words in bm25s.tokenize(list(texts), stopwords="en", stemmer=stemmer, return_ids=False, show_progress=False)
    ]


def bm25_words(texts: Iterable[str]) -> list[str]:
    """The words BM25 sees, as the FAISS path's bm25s does: stop words out, Snowball stems.
    Written to a field of their own because Milvus Lite's analyzer only lowercases and splits
    (Milvus' own stemmer filter is not in Lite): both stores then rank with the same words."""
    return _bm25_words()(texts)


# Milvus Lite's server keeps gRPC's default ping policy (no pings on an idle connection, at
# most one per 5 minutes) and closes a client that pings every 10 s while idle (pymilvus'
# default) with GOAWAY "too_many_pings"; the next request then fails.
GRPC_OPTIONS = {"grpc.keepalive_time_ms": 300_000, "grpc.keepalive_permit_without_calls": 0}


@contextmanager
def milvus_errors(settings: Settings) -> Iterator[None]:
    """A Milvus failure (server down, timeout, refused request) becomes one clear error."""
    from pymilvus.exceptions import MilvusException

    try:
        yield
    except MilvusException as exc:
        raise StoreUnavailableError(
            f"Milvus at {settings.milvus_address} failed: {getattr(exc, 'message', exc)}; nothing was changed "
            f"that a retry would not finish"
        ) from exc


def connect(settings: Settings):
    from pymilvus import MilvusClient

    address = settings.milvus_address
    if "://" not in address:  # Milvus Lite in a local file: its folder must exist
        Path(address).expanduser().parent.mkdir(parents=True, exist_ok=True)
    # Our errors say what failed; pymilvus' own log of each (a traceback on stderr) is noise.
    logging.getLogger("pymilvus").setLevel(logging.CRITICAL)
    with milvus_errors(settings):
        return MilvusClient(
            uri=address, token=settings.milvus_token or "", timeout=settings.milvus_timeout, grpc_options=GRPC_OPTIONS
        )


@dataclass
class Names:
    base: str
    generation: str

    @property
    def meta(self) -> str:
        return f"{self.base}_meta"

    def of(self, table: str) -> str:
        return f"{self.base}_{self.generation}_{table}"


def _loaded(client, *names: str) -> None:
    """Collections come back released after a server restart: load them (a no-op when loaded)."""
    for name in names:
        client.load_collection(name)


def _read_meta(client, base: str) -> dict | None:
    if not client.has_collection(f"{base}_meta"):
        return None
    rows = client.query(f"{base}_meta", ids=["current"], output_fields=["value"])
    return json.loads(rows[0]["value"]) if rows else None


def _write_meta(client, base: str, manifest: dict) -> None:
    client.upsert(f"{base}_meta", [{"key": "current", "value": json.dumps(manifest), "v": _NO_VECTOR}])


def _create(client, name: str, fields: list[tuple], vectors: dict[str, str], bm25: str | None = None) -> None:
    """A collection with `fields` ((name, type, kwargs)), an IP index on each of `vectors`
    (field -> "FLAT"/"HNSW") and, with `bm25`, a BM25 function over that text field."""
    from pymilvus import DataType, Function, FunctionType, MilvusClient

    schema = MilvusClient.create_schema(auto_id=False)
    for name_, kind, kwargs in fields:
        schema.add_field(name_, getattr(DataType, kind), **kwargs)
    params = client.prepare_index_params()
    if any(f[0] == "paper_id" and not f[2].get("is_primary") for f in fields):  # reads and deletes select by paper
        params.add_index("paper_id", index_type="INVERTED")
    for vector, kind in vectors.items():
        params.add_index(
            vector,
            index_type=kind,
            metric_type="IP",
            **({"params": {"M": 32, "efConstruction": 64}} if kind == "HNSW" else {}),
        )
    if bm25 is not None:
        schema.add_field("sparse", DataType.SPARSE_FLOAT_VECTOR)
        schema.add_function(
            Function(
                name=f"{bm25}_bm25",
                function_type=FunctionType.BM25,
                input_field_names=[bm25],
                output_field_names=["sparse"],
            )
        )
        # k1 = 1.5 as bm25s (the FAISS path); Milvus' default is 1.2.
        params.add_index(
            "sparse", index_type="SPARSE_INVERTED_INDEX", metric_type="BM25", params={"bm25_k1": 1.5, "bm25_b": 0.75}
        )
    # Strong: a search sees every insert acknowledged before it, so an add is visible to every
    # replica as soon as it is committed.
    client.create_collection(name, schema=schema, index_params=params, consistency_level="Strong")


def _create_generation(client, names: Names, dimensions: int, multilingual: int | None, kind: str) -> None:
    key = ("id", "VARCHAR", {"is_primary": True, "max_length": 64})
    pid = ("paper_id", "VARCHAR", {"max_length": 16})
    vectors = [("dense", "FLOAT_VECTOR", {"dim": dimensions})]
    if multilingual:
        vectors.append(("multilingual", "FLOAT_VECTOR", {"dim": multilingual}))
    indexed = {v[0]: kind for v in vectors}
    _create(
        client,
        names.of("chunks"),
        [
            key,
            pid,
            ("text", "VARCHAR", {"max_length": _TEXT}),
            ("words", "VARCHAR", {"max_length": _TEXT, "enable_analyzer": True}),
            *vectors,
        ],
        indexed,
        bm25="words",
    )
    _create(
        client,
        names.of("sentences"),
        [key, pid, ("position", "INT64", {}), ("text", "VARCHAR", {"max_length": _TEXT}), *vectors],
        indexed,
    )
    _create(
        client,
        names.of("papers"),
        [
            ("paper_id", "VARCHAR", {"is_primary": True, "max_length": 16}),
            ("seq", "INT64", {}),
            ("record", "VARCHAR", {"max_length": _TEXT}),
            ("v", "FLOAT_VECTOR", {"dim": 2}),
        ],
        {"v": "FLAT"},
    )


def _ensure_meta(client, base: str) -> None:
    if not client.has_collection(f"{base}_meta"):
        _create(
            client,
            f"{base}_meta",
            [
                ("key", "VARCHAR", {"is_primary": True, "max_length": 64}),
                ("value", "VARCHAR", {"max_length": _TEXT}),
                ("v", "FLOAT_VECTOR", {"dim": 2}),
            ],
            {"v": "FLAT"},
        )


@dataclass
class _Embedded:
    """What a set of papers adds to the collections, embedded."""

    chunks: list[dict] = field(default_factory=list)
    sentences: list[dict] = field(default_factory=list)
    papers: list[dict] = field(default_factory=list)


def _embed(
    papers: list[Paper], settings: Settings, embedder, multilingual, show_progress: bool, seq: int, remote=None
) -> _Embedded:
    """Chunks and sentences of `papers` with their vectors, as the FAISS build makes them;
    `remote` (a `ray_embedding.RayEmbedding`) embeds them on a Ray cluster instead."""
    from llama_index.core.schema import MetadataMode

    out = _Embedded()
    if not papers:
        return out
    nodes = chunk_papers(papers, tokenizer_of(embedder), settings.chunk_size, settings.chunk_overlap)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    sentences = [s for p in papers for s in split_sentences(p)]
    known = KnownVectors()
    if remote is not None:
        known = remote.vectors(nodes, sentences, settings, known, exported_encoder(settings))

    def vectors(model, items: list[str], kept: list | None, progress: bool) -> list[list[float]]:
        found = kept if kept is not None else model.get_text_embedding_batch(items, show_progress=progress)
        return np.asarray(found, dtype=np.float32).tolist()

    def kept(table: dict, keys: list):
        return [table[key] for key in keys] if remote is not None else None

    chunk_vectors = vectors(embedder, texts, kept(known.chunks, [n.id_ for n in nodes]), show_progress)
    sentence_vectors = vectors(embedder, [s.text for s in sentences], kept(known.sentences, sentences), show_progress)
    for node, text, words, vector in zip(nodes, texts, bm25_words(texts), chunk_vectors, strict=False):
        out.chunks.append(
            {"id": node.id_, "paper_id": node.metadata["paper_id"], "text": text, "words": words, "dense": vector}
        )
    positions: dict[str, int] = {}
    for sentence, vector in zip(sentences, sentence_vectors, strict=False):
        position = positions[sentence.paper_id] = positions.get(sentence.paper_id, -1) + 1
        out.sentences.append(
            {
                "id": f"{sentence.paper_id}-s{position}",
                "paper_id": sentence.paper_id,
                "position": position,
                "text": sentence.text,
                "dense": vector,
            }
        )
    if multilingual is not None:
        found = vectors(multilingual, texts, kept(known.multilingual_chunks, [n.id_ for n in nodes]), False)
        for row, vector in zip(out.chunks, found, strict=False):
            row["multilingual"] = vector
        found = vectors(multilingual, [s.text for s in sentences], kept(known.multilingual_sentences, sentences), False)
        for row, vector in zip(out.sentences, found, strict=False):
            row["multilingual"] = vector
    out.papers = [
        {"paper_id": p.paper_id, "seq": seq + i, "record": json.dumps(p.to_dict(), ensure_ascii=False), "v": _NO_VECTOR}
        for i, p in enumerate(papers)
    ]
    return out


def _insert(client, name: str, rows: list[dict]) -> None:
    for start in range(0, len(rows), _BATCH):
        client.insert(name, rows[start : start + _BATCH])


def _id_filter(paper_ids: Iterable[str]) -> str:
    return f"paper_id in {json.dumps(sorted(paper_ids))}"


def _write(client, names: Names, embedded: _Embedded, settings: Settings) -> None:
    """Chunks and sentences first, paper rows last: a paper is visible only once whole. What a
    killed attempt left of these papers (rows with no paper row) is deleted first."""
    ids = [row["paper_id"] for row in embedded.papers]
    if not ids:
        return
    for table in ("chunks", "sentences"):
        client.delete(names.of(table), filter=_id_filter(ids))
    _insert(client, names.of("chunks"), embedded.chunks)
    pause_point(settings, "writing")
    _insert(client, names.of("sentences"), embedded.sentences)
    pause_point(settings, "before-publish")
    _insert(client, names.of("papers"), embedded.papers)


def _load_papers(client, names: Names) -> list[Paper]:
    rows = []
    iterator = client.query_iterator(names.of("papers"), batch_size=1000, output_fields=["seq", "record"])
    while batch := iterator.next():
        rows.extend(batch)
    iterator.close()
    return [Paper(**json.loads(r["record"])) for r in sorted(rows, key=lambda r: r["seq"])]


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

    def __init__(self, client, settings: Settings, manifest: dict, corpus: Corpus, embedder, multilingual_embedder):
        self.client = client
        self.settings = settings
        self.manifest = manifest
        self.corpus = corpus
        self.embedder = embedder
        self.multilingual_embedder = multilingual_embedder
        self.names = Names(settings.milvus_collection, manifest["generation"])

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
        latest = self._read(lambda: _read_meta(self.client, self.names.base))
        return latest is None or latest.get("version") == self.version

    def _read(self, request):
        """A read, retried once after what a Milvus restart leaves: a dead connection (gRPC
        waits out its reconnect backoff, so a new one is made) and released collections."""
        from pymilvus.exceptions import MilvusException

        with milvus_errors(self.settings):
            try:
                return request()
            except MilvusException as exc:
                if exc.code not in (_NOT_LOADED, _UNREACHABLE):
                    raise
                if exc.code == _UNREACHABLE:
                    self.client.close()
                    self.client = connect(self.settings)
                _loaded(self.client, self.names.meta, *(self.names.of(table) for table in _TABLES))
                return request()

    def _search(self, data, field_name: str, k: int) -> list[tuple[str, float]]:
        found = self._read(
            lambda: self.client.search(
                self.names.of("chunks"), data=[data], anns_field=field_name, limit=k, output_fields=["paper_id"]
            )
        )
        return [(hit["entity"]["paper_id"], float(hit["distance"])) for hit in found[0]]

    def dense_ranking(self, vector, k: int, multilingual: bool) -> list[tuple[str, float]]:
        return self._search(
            np.asarray(vector, dtype=np.float32).tolist(), "multilingual" if multilingual else "dense", k
        )

    def bm25_ranking(self, query: str, k: int) -> list[tuple[str, float]]:
        (words,) = bm25_words([query])
        if not words:
            return []
        # Milvus Lite reports a BM25 match as a negative distance; a server as a positive score.
        return [(pid, abs(score)) for pid, score in self._search(words, "sparse", k)]

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
                self.names.of("sentences"), filter=_id_filter(ids), output_fields=fields, limit=16384
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

    def sentence_texts(self) -> list[str]:
        return [s.text for p in self.corpus.papers for s in split_sentences(p)]


def load(settings: Settings, check: bool = True) -> MilvusIndex:
    """Connect and read the current generation's paper table (no file of the replica is read).
    `check`: refuse a collection built with another model or chunking (IndexStaleError)."""
    client = connect(settings)
    with milvus_errors(settings):
        if client.has_collection(f"{settings.milvus_collection}_meta"):
            _loaded(client, f"{settings.milvus_collection}_meta")
        manifest = _read_meta(client, settings.milvus_collection)
        if manifest is None:
            raise IndexNotFoundError(
                f"no index in Milvus at {settings.milvus_address} (collection "
                f"{settings.milvus_collection}): run `rag index` with RAG_VECTOR_STORE=milvus"
            )
        if check:
            _check(manifest, settings)
        names = Names(settings.milvus_collection, manifest["generation"])
        _loaded(client, *(names.of(table) for table in _TABLES))
        corpus = Corpus(_load_papers(client, names), manifest.get("paragraphs", 0))
    multilingual = load_multilingual_embedder() if settings.multilingual else None
    # Questions (and the papers an add brings) through the ONNX export, as on the FAISS path.
    embedder = _query_encoder(settings)
    return MilvusIndex(client, settings, manifest, corpus, embedder, multilingual)


def _check(manifest: dict, settings: Settings) -> None:
    for key, wanted in expected_parameters(settings).items():
        if manifest.get(key) != wanted:
            raise IndexStaleError(
                f"the Milvus collection {settings.milvus_collection} was built with {key}="
                f"{manifest.get(key)!r}, settings ask for {wanted!r}; run `rag index` to rebuild it"
            )


def _query_encoder(settings: Settings):
    return cached_query_encoder(exported_encoder(settings).parent, settings.embedding_model)


def _models(settings: Settings):
    """Encoders for a build: documents through the ONNX export in batches on every core."""
    documents = document_embedder(exported_encoder(settings), settings.embedding_model, _query_encoder(settings))
    return documents, (load_multilingual_embedder() if settings.multilingual else None)


def _manifest(
    settings: Settings, generation: str, corpus: Corpus, chunks: int, sentences: int, dimensions: int, kind: str
) -> dict:
    return {
        **expected_parameters(settings),
        "store": "milvus",
        "generation": generation,
        "version": uuid.uuid4().hex[:12],
        "papers": len(corpus),
        "chunks": chunks,
        "sentences": sentences,
        "paragraphs": corpus.paragraphs,
        "dimensions": dimensions,
        "index_kind": kind,
        "corpus_hash": corpus.content_hash,
        "seed_files": corpus.files,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def build(corpus: Corpus, settings: Settings, show_progress: bool = False, remote=None) -> dict:
    """Write `corpus` as a new generation and make it current; returns its manifest. Papers
    added to the current generation while this ran are copied over after the switch."""
    client = connect(settings)
    base = settings.milvus_collection
    embedder, multilingual = _models(settings)
    with milvus_errors(settings):
        _ensure_meta(client, base)
        _loaded(client, f"{base}_meta")
        before = _read_meta(client, base)
        generation = uuid.uuid4().hex[:8]
        names = Names(base, generation)
        embedded = _embed(corpus.papers, settings, embedder, multilingual, show_progress, seq=0, remote=remote)
        kind = "HNSW" if len(embedded.chunks) >= settings.hnsw_above else "FLAT"
        dimensions = len(embedded.chunks[0]["dense"]) if embedded.chunks else 0
        _create_generation(
            client,
            names,
            dimensions,
            len(embedded.chunks[0]["multilingual"]) if multilingual and embedded.chunks else None,
            kind,
        )
        _write(client, names, embedded, settings)
        for table in _TABLES:
            # Sealed segments are searched through their indexes; rows still in memory are
            # scanned one by one at every search (Milvus Lite: 70 ms instead of 3 at 2,000
            # papers). Adds stay in memory until Milvus seals them with later ones.
            client.flush(names.of(table))
        manifest = _manifest(
            settings, generation, corpus, len(embedded.chunks), len(embedded.sentences), dimensions, kind
        )
        _write_meta(client, base, manifest)
        if before is not None:
            old = Names(base, before["generation"])
            late = []
            if client.has_collection(old.of("papers")):
                _loaded(client, old.of("papers"))
                late = [p for p in _load_papers(client, old) if corpus.get(p.paper_id) is None and _added(p)]
            if late:
                manifest = _add_papers(client, settings, late, embedder, multilingual)
            _drop_generations(client, base, keep={generation, before["generation"]})
    return manifest


def _added(paper: Paper) -> bool:
    return bool(paper.sources) and all(s.startswith(_ADDED) for s in paper.sources)


def _drop_generations(client, base: str, keep: set[str]) -> None:
    for name in client.list_collections():
        if not name.startswith(f"{base}_"):
            continue
        parts = name[len(base) + 1 :].split("_")
        if len(parts) == 2 and _GENERATION.fullmatch(parts[0]) and parts[1] in _TABLES and parts[0] not in keep:
            client.drop_collection(name)


def _add_papers(client, settings: Settings, papers: list[Paper], embedder, multilingual) -> dict:
    """Embed and commit `papers` into the current generation, then announce a new version. When
    a full build switched generations meanwhile, they are written again into the new one."""
    base = settings.milvus_collection
    manifest = _read_meta(client, base)
    embedded = _embed(papers, settings, embedder, multilingual, False, seq=time.time_ns())
    pause_point(settings, "embedding")
    while True:
        _write(client, Names(base, manifest["generation"]), embedded, settings)
        latest = _read_meta(client, base)
        if latest["generation"] == manifest["generation"]:
            break
        manifest = latest
    manifest = {
        **latest,
        "version": uuid.uuid4().hex[:12],
        "papers": latest["papers"] + len(papers),
        "chunks": latest["chunks"] + len(embedded.chunks),
        "sentences": latest["sentences"] + len(embedded.sentences),
    }
    _write_meta(client, base, manifest)
    return manifest


def _remove_papers(client, settings: Settings, paper_ids: list[str]) -> dict:
    """Paper rows first (the paper disappears for readers at once), then its chunks and sentences."""
    base = settings.milvus_collection
    manifest = _read_meta(client, base)
    names = Names(base, manifest["generation"])
    for table in ("papers", "chunks", "sentences"):
        client.delete(names.of(table), filter=_id_filter(paper_ids))
    manifest = {**manifest, "version": uuid.uuid4().hex[:12], "papers": manifest["papers"] - len(paper_ids)}
    _write_meta(client, base, manifest)
    return manifest


def index_seeds(
    settings: Settings, show_progress: bool = False, only_if_stale: bool = False, remote=None
) -> IndexReport:
    """`rag index` on Milvus. A full build from the seed folder, keeping the papers that were
    added through the service or `rag add`; with `only_if_stale`, only the papers of new seed
    files are added and those of removed files deleted."""
    started = time.perf_counter()
    seeds = load_corpus(settings.seeds_dir)
    current = None
    reason = "a full rebuild was asked for"
    if only_if_stale:
        try:
            current = load(settings)
        except (IndexNotFoundError, IndexStaleError) as exc:
            reason = str(exc)
    if current is None:
        kept = []  # added through the service: the collection is their only record, whatever its model
        with contextlib.suppress(IndexNotFoundError):
            kept = [p for p in load(settings, check=False).corpus.papers if seeds.get(p.paper_id) is None and _added(p)]
        corpus = Corpus(seeds.papers + kept, seeds.paragraphs + len(kept), seeds.files)
        manifest = build(corpus, settings, show_progress, remote)
        return IndexReport(
            _where(settings, manifest),
            reason,
            False,
            manifest["papers"],
            0,
            0,
            time.perf_counter() - started,
            manifest["chunks"],
        )
    from_seeds = Corpus([p for p in current.corpus.papers if not _added(p)], 0)
    changes = SeedChanges.between(from_seeds, seeds)
    added = [p for p in seeds.papers if p.paper_id in set(changes.added) and current.corpus.get(p.paper_id) is None]
    if not added and not changes.removed:
        return IndexReport(None, None, False, len(current.corpus), 0, 0, time.perf_counter() - started)
    with milvus_errors(settings):
        manifest = current.manifest
        if changes.removed:
            manifest = _remove_papers(current.client, settings, changes.removed)
        if added:
            manifest = _add_papers(current.client, settings, added, current.embedder, current.multilingual_embedder)
    return IndexReport(
        _where(settings, manifest),
        str(changes),
        True,
        manifest["papers"],
        len(added),
        len(changes.removed),
        time.perf_counter() - started,
        manifest["chunks"],
    )


def _where(settings: Settings, manifest: dict) -> str:
    return f"{settings.milvus_address} ({settings.milvus_collection}, generation {manifest['generation']})"


def add_seed_texts(settings: Settings, items: list[tuple[str, bytes]], current: MilvusIndex | None = None) -> AddResult:
    """Add the abstracts of seed-format files that the collection lacks. The collection is the
    record: no file is written (a replica holds none); `rag index` keeps these papers."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    parsed = [(f"{_ADDED}{stamp}-{name}", parse_seed(raw, name)) for name, raw in items]
    current = current or load(settings)
    new = build_corpus(parsed)
    with milvus_errors(settings):
        known = {
            r["paper_id"]
            for r in current.client.query(
                current.names.of("papers"), filter=_id_filter(new.by_id), output_fields=["paper_id"], limit=16384
            )
        }
        fresh = [p for p in new.papers if p.paper_id not in known]
        duplicates = [p for p in new.papers if p.paper_id in known]
        if not fresh:
            return AddResult(None, [], duplicates)
        pause_point(settings, "seed-written")
        manifest = _add_papers(current.client, settings, fresh, current.embedder, current.multilingual_embedder)
    pause_point(settings, "after-publish")
    return AddResult(_where(settings, manifest), fresh, duplicates)
