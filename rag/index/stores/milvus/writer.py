"""Writing the Milvus store: a full build as a new generation, and adds and removals within
the current one, each in an order that leaves every paper whole or absent for readers.

A full build writes a new generation and then points the meta row at it (the old generation
stays until the next build, for replicas still reading it). An add writes a paper's chunks and
sentences first and its paper row last: readers only see papers that have a row, so an add
killed at any point leaves each paper whole or absent, and a retry deletes what a dead attempt
left before writing the paper again (each abstract once).
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

import numpy as np
from tqdm import tqdm

from rag.common.settings import Settings
from rag.index import titles, topics
from rag.index.chunking import chunk_papers, split_sentences
from rag.index.corpus import Corpus, Paper
from rag.index.embedding import document_embedder, tokenizer_of
from rag.index.llm_titles import LLM_TITLES
from rag.index.stores.base import (
    KnownVectors,
    Ranked,
    best_per_paper,
    document_encoder,
    expected_parameters,
    exported_encoder,
    is_added,
    multilingual_encoder,
    pause_point,
    vector_index_kind,
)
from rag.index.stores.milvus.collections import (
    GENERATION,
    NO_VECTOR,
    TABLES,
    Names,
    bm25_words,
    connect,
    create_generation,
    current_meta,
    ensure_meta,
    id_filter,
    index_generation,
    insert,
    load_papers,
    loaded,
    milvus_errors,
    places_of,
    read_meta,
    write_meta,
)
from rag.index.topics import Place, TopicMap

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding

    from rag.index.ray_embedding import RayEmbedding


@dataclass
class _Embedded:
    """What a set of papers adds to the collections, embedded."""

    chunks: list[dict] = field(default_factory=list)
    sentences: list[dict] = field(default_factory=list)
    papers: list[dict] = field(default_factory=list)  # made once the papers have their places (`_paper_rows`)
    vectors: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), np.float32))  # the papers' (the map's input)


def _embed(
    papers: list[Paper],
    settings: Settings,
    embedder: BaseEmbedding,
    multilingual: BaseEmbedding | None,
    remote: RayEmbedding | None = None,
) -> _Embedded:
    """Chunks and sentences of `papers` with their vectors, as the FAISS build makes them;
    `remote` (a `ray_embedding.RayEmbedding`) embeds them on a Ray cluster instead."""
    from llama_index.core.schema import MetadataMode

    out = _Embedded()
    if not papers:
        return out
    nodes = chunk_papers(papers, tokenizer_of(embedder), settings.indexing.chunk_size, settings.indexing.chunk_overlap)
    texts = [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
    sentences = [s for p in papers for s in split_sentences(p)]
    known = KnownVectors()
    if remote is not None:
        known = remote.vectors(nodes, sentences, settings, known, exported_encoder(settings))

    def vectors(model, items: list[str], kept: list | None) -> list[list[float]]:
        found = kept if kept is not None else model.get_text_embedding_batch(items)
        return np.asarray(found, dtype=np.float32).tolist()

    def kept(table: dict, keys: list):
        return [table[key] for key in keys] if remote is not None else None

    chunk_vectors = vectors(embedder, texts, kept(known.chunks, [n.id_ for n in nodes]))
    sentence_vectors = vectors(embedder, [s.text for s in sentences], kept(known.sentences, sentences))
    for node, text, words, vector in zip(nodes, texts, bm25_words(texts), chunk_vectors, strict=True):
        out.chunks.append(
            {"id": node.id_, "paper_id": node.metadata["paper_id"], "text": text, "words": words, "dense": vector}
        )
    positions: dict[str, int] = {}
    for sentence, vector in zip(sentences, sentence_vectors, strict=True):
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
        found = vectors(multilingual, texts, kept(known.multilingual_chunks, [n.id_ for n in nodes]))
        for row, vector in zip(out.chunks, found, strict=True):
            row["multilingual"] = vector
        found = vectors(multilingual, [s.text for s in sentences], kept(known.multilingual_sentences, sentences))
        for row, vector in zip(out.sentences, found, strict=True):
            row["multilingual"] = vector
    out.vectors = topics.paper_vectors(
        np.asarray(sentence_vectors, np.float32).reshape(len(sentences), -1),
        [positions.get(p.paper_id, -1) + 1 for p in papers],
    )
    return out


def _paper_rows(papers: list[Paper], seq: int, places: dict[str, Place]) -> list[dict]:
    """The papers' rows, numbered from `seq` (their order), each with its place on the map."""
    return [
        {
            "paper_id": p.paper_id,
            "seq": seq + i,
            "record": json.dumps(p.to_dict(), ensure_ascii=False),
            **asdict(places[p.paper_id]),
            "v": NO_VECTOR,
        }
        for i, p in enumerate(papers)
    ]


def _places(client, names: Names, papers: list[Paper], vectors: np.ndarray, settings: Settings) -> dict[str, Place]:
    """New papers placed on the generation's map among their nearest papers there (rag/index/topics.py):
    the generation's chunks searched with each paper's vector, the neighbours' places read."""
    if not papers:
        return {}
    found = client.search(
        names.of("chunks"),
        data=vectors.tolist(),
        anns_field="dense",
        limit=settings.map.neighbours * settings.retrieval.similar_chunks_per_paper,
        output_fields=["paper_id"],
    )
    neighbours = [
        best_per_paper(Ranked(hit["entity"]["paper_id"], float(hit["distance"])) for hit in hits)[
            : settings.map.neighbours
        ]
        for hits in found
    ]
    ids = sorted({n.paper_id for near in neighbours for n in near})
    known = places_of(
        client.query(names.of("papers"), filter=id_filter(ids), output_fields=["paper_id", "x", "y", "topic"])
        if ids
        else []
    )
    return {p.paper_id: topics.place(near, known) for p, near in zip(papers, neighbours, strict=True)}


def _write(client, names: Names, embedded: _Embedded, settings: Settings) -> None:
    """Chunks and sentences first, paper rows last: a paper is visible only once whole. What a
    killed attempt left of these papers (rows with no paper row) is deleted first."""
    ids = [row["paper_id"] for row in embedded.papers]
    if not ids:
        return
    for table in ("chunks", "sentences"):
        client.delete(names.of(table), filter=id_filter(ids))
    _insert(client, names, embedded, settings)


def _insert(client, names: Names, embedded: _Embedded, settings: Settings) -> None:
    """A build inserts its paper rows once its map is fitted (`embedded.papers` is then empty)."""
    insert(client, names.of("chunks"), embedded.chunks)
    pause_point(settings, "writing")
    insert(client, names.of("sentences"), embedded.sentences)
    pause_point(settings, "before-publish")
    insert(client, names.of("papers"), embedded.papers)


def _models(settings: Settings):
    """Encoders for a build: documents through the ONNX export in batches on every core."""
    documents = document_embedder(
        exported_encoder(settings), settings.indexing.embedding_model, document_encoder(settings)
    )
    return documents, (multilingual_encoder(settings) if settings.indexing.multilingual else None)


def _manifest(
    settings: Settings,
    generation: str,
    corpus: Corpus,
    chunks: int,
    sentences: int,
    dimensions: int,
    kind: str,
    topic_map: TopicMap,
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
        "topics": [asdict(t) for t in topic_map.topics],  # the papers' places are in their rows
        "corpus_hash": corpus.content_hash,
        "seed_files": corpus.files,
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def build(corpus: Corpus, settings: Settings, show_progress: bool = False, remote: RayEmbedding | None = None) -> dict:
    """Write `corpus` as a new generation and make it current; returns its manifest. Papers
    added to the current generation while this ran are copied over after the switch."""
    client = connect(settings)
    base = settings.store.milvus_collection
    embedder, multilingual = _models(settings)
    with milvus_errors(settings):
        ensure_meta(client, base)
        loaded(client, f"{base}_meta")
        before = read_meta(client, base)
        generation = uuid.uuid4().hex[:8]
        names = Names(base, generation)
        # Papers are embedded and written build_batch at a time: a build holds one batch's
        # texts and vectors, whatever the corpus size. The generation is indexed once written,
        # when its vector count (which picks FLAT or HNSW) is known.
        chunks = sentences = dimensions = 0
        multilingual_dimensions = None
        paper_vectors = []
        with tqdm(total=len(corpus), desc="papers", unit="paper", disable=not show_progress) as progress:
            for start in range(0, len(corpus), settings.store.build_batch):
                papers = corpus.papers[start : start + settings.store.build_batch]
                embedded = _embed(papers, settings, embedder, multilingual, remote=remote)
                paper_vectors.append(embedded.vectors)
                if start == 0:
                    first = embedded.chunks[0] if embedded.chunks else {}
                    dimensions = len(first.get("dense", ()))
                    multilingual_dimensions = len(first["multilingual"]) if "multilingual" in first else None
                    create_generation(client, names, dimensions, multilingual_dimensions)
                _insert(client, names, embedded, settings)
                chunks, sentences = chunks + len(embedded.chunks), sentences + len(embedded.sentences)
                progress.update(len(papers))
        # The generation is not current yet: its paper rows can wait for the map and the titles.
        vectors = np.concatenate(paper_vectors or [np.zeros((0, 1))])
        del paper_vectors
        asked = titles.title_unnamed(
            corpus.papers, vectors, vectors[titles.contrast_rows(len(vectors), settings)], embedder, settings
        )
        topic_map = topics.fit_map(corpus.papers, vectors, settings)
        del vectors
        for start in range(0, len(corpus), settings.store.build_batch):
            papers = corpus.papers[start : start + settings.store.build_batch]
            insert(client, names.of("papers"), _paper_rows(papers, start, topic_map.places))
        kind = vector_index_kind(settings, chunks)
        # Flushed first (in index_generation): sealed segments are searched through their
        # indexes; rows still in memory are scanned one by one at every search (Milvus Lite:
        # 70 ms instead of 3 at 2,000 papers). Adds stay in memory until Milvus seals them.
        index_generation(client, names, dimensions, multilingual_dimensions, kind.upper())
        manifest = _manifest(settings, generation, corpus, chunks, sentences, dimensions, kind, topic_map)
        manifest[LLM_TITLES] = asked.to_dict() if asked is not None else None
        write_meta(client, base, manifest)
        if before is not None:
            old = Names(base, before["generation"])
            late = []
            if client.has_collection(old.of("papers")):
                loaded(client, old.of("papers"))
                late = [p for p in load_papers(client, old)[0] if corpus.get(p.paper_id) is None and is_added(p)]
            if late:
                manifest = add_papers(client, settings, late, embedder, multilingual, np.zeros((0, dimensions)))
            _drop_generations(client, base, keep={generation, before["generation"]})
    return manifest


def _drop_generations(client, base: str, keep: set[str]) -> None:
    for name in client.list_collections():
        if not name.startswith(f"{base}_"):
            continue
        parts = name[len(base) + 1 :].split("_")
        if len(parts) == 2 and GENERATION.fullmatch(parts[0]) and parts[1] in TABLES and parts[0] not in keep:
            client.drop_collection(name)


def add_papers(
    client,
    settings: Settings,
    papers: list[Paper],
    embedder: BaseEmbedding,
    multilingual: BaseEmbedding | None,
    contrast: np.ndarray,
) -> dict:
    """Embed and commit `papers` into the current generation, then announce a new version; a
    paper without a name gets its title told apart from `contrast` (other papers' vectors). When
    a full build switched generations meanwhile, they are written again into the new one."""
    base = settings.store.milvus_collection
    manifest = current_meta(client, settings)
    embedded = _embed(papers, settings, embedder, multilingual)
    asked = titles.title_unnamed(papers, embedded.vectors, contrast, embedder, settings)
    pause_point(settings, "embedding")
    while True:
        names = Names(base, manifest["generation"])
        places = _places(client, names, papers, embedded.vectors, settings)
        embedded.papers = _paper_rows(papers, time.time_ns(), places)
        _write(client, names, embedded, settings)
        latest = current_meta(client, settings)
        if latest["generation"] == manifest["generation"]:
            break
        manifest = latest
    manifest = {
        **latest,
        "version": uuid.uuid4().hex[:12],
        "papers": latest["papers"] + len(papers),
        "chunks": latest["chunks"] + len(embedded.chunks),
        "sentences": latest["sentences"] + len(embedded.sentences),
        LLM_TITLES: asked.to_dict() if asked is not None else None,  # this add's, not the build's
    }
    write_meta(client, base, manifest)
    return manifest


def remove_papers(client, settings: Settings, paper_ids: list[str]) -> dict:
    """Paper rows first (the paper disappears for readers at once), then its chunks and sentences."""
    base = settings.store.milvus_collection
    manifest = current_meta(client, settings)
    names = Names(base, manifest["generation"])
    for table in ("papers", "chunks", "sentences"):
        client.delete(names.of(table), filter=id_filter(paper_ids))
    manifest = {**manifest, "version": uuid.uuid4().hex[:12], "papers": manifest["papers"] - len(paper_ids)}
    write_meta(client, base, manifest)
    return manifest


def where(settings: Settings, manifest: dict) -> str:
    return f"{settings.milvus_address} ({settings.store.milvus_collection}, generation {manifest['generation']})"
