"""Writing a FAISS build: chunks and sentences embedded (reusing a previous build's vectors),
FAISS through LlamaIndex, BM25, the paper and sentence tables, then sealed and published."""

from __future__ import annotations

import json
import os
import shutil
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...chunking import Sentence, chunk_papers, split_sentences
from ...config import Settings
from ...corpus import Corpus
from ...embedding import (
    QUERY_ENCODER,
    cached_query_encoder,
    configure_llama_index,
    document_embedder,
    file_digest,
    load_multilingual_embedder,
    tokenizer_of,
)
from ...lexicon import Lexicon
from ..base import KnownVectors, expected_parameters, exported_encoder, pause_point, vector_index_kind
from . import folders
from .reader import CHUNKS, LEXICON, LoadedIndex

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding

    from ...ray_embedding import RayEmbedding


def make_faiss_index(dimensions: int, kind: str, settings: Settings):
    """Inner-product search (vectors are normalised, so scores are cosines)."""
    import faiss

    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dimensions, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 64
        index.hnsw.efSearch = settings.hnsw_ef_search
        return index
    return faiss.IndexFlatIP(dimensions)


def build_vector_index(
    nodes,
    embed_model: BaseEmbedding,
    directory: Path,
    show_progress: bool,
    faiss_index,
    known: dict[str, np.ndarray] | None = None,
):
    """Embed and store `nodes`; a node whose vector `known` holds (by node id) is not embedded again."""
    from llama_index.core import StorageContext, VectorStoreIndex
    from llama_index.vector_stores.faiss import FaissVectorStore

    known = known or {}
    nodes = [n.model_copy(update={"embedding": known[n.id_].tolist()}) if n.id_ in known else n for n in nodes]
    store = FaissVectorStore(faiss_index=faiss_index)
    context = StorageContext.from_defaults(vector_store=store)
    index = VectorStoreIndex(nodes, storage_context=context, embed_model=embed_model, show_progress=show_progress)
    # The reader maps FAISS rows to chunks by chunks.json, written in the order of `nodes`.
    rows = index.index_struct.nodes_dict
    if [rows.get(str(i)) for i in range(len(nodes))] != [n.id_ for n in nodes]:
        raise RuntimeError("LlamaIndex stored the chunks out of order")
    context.persist(persist_dir=str(directory))
    return index


def known_vectors(previous: LoadedIndex | None) -> KnownVectors:
    """The vectors `previous` holds, by chunk id and by sentence."""
    if previous is None:
        return KnownVectors()

    def chunks(index) -> dict[str, np.ndarray]:
        return {} if index is None else index.vectors()

    def sentences(matrix) -> dict[Sentence, np.ndarray]:
        return {} if matrix is None else dict(zip(previous.sentences, matrix, strict=True))

    return KnownVectors(
        chunks(previous.dense),
        sentences(previous.sentence_vectors),
        chunks(previous.multilingual),
        sentences(previous.multilingual_sentence_vectors),
    )


def _embed_sentences(
    embed_model: BaseEmbedding, sentences: list[Sentence], known: dict, show_progress: bool
) -> np.ndarray:
    missing = [s for s in sentences if s not in known]
    if missing:
        vectors = embed_model.get_text_embedding_batch([s.text for s in missing], show_progress=show_progress)
        known = {**known, **dict(zip(missing, np.asarray(vectors, dtype=np.float32), strict=True))}
    return np.asarray([known[s] for s in sentences], dtype=np.float32).reshape(len(sentences), -1)


def _link_or_copy(source: Path, target: Path) -> None:
    """Builds are never modified, so a file they share can be one file on disk."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def build_index(corpus: Corpus, settings: Settings, show_progress: bool = False, remote=None) -> Path:
    """Build the whole index from `corpus`, embedding everything, and publish it atomically;
    returns its directory. Takes no lock: to build from the seed folder while adds may run,
    use `rag.stores.index_seeds`."""
    return write_build(corpus, settings, show_progress, previous=None, remote=remote)


def write_build(
    corpus: Corpus,
    settings: Settings,
    show_progress: bool,
    previous: LoadedIndex | None,
    remote: RayEmbedding | None = None,
) -> Path:
    """Write a build of `corpus` and publish it. With `previous` (a build under the same model
    and chunking), its vectors are reused and only new chunks and sentences are embedded, by the
    encoder that build serves questions with (the model's own vectors, cosine > 0.9999): an add
    or a catch-up costs what is new, not the corpus. The result is what a full build gives,
    paper order included. `remote` (a `ray_embedding.RayEmbedding`) embeds on a Ray cluster
    instead of in this process."""
    started = time.perf_counter()
    root = Path(settings.index_dir)
    known = known_vectors(previous)
    linked: dict = {}
    with folders.writing(root), folders.staging(root) as work:
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

        kind = vector_index_kind(settings, len(nodes))
        dimensions = len(documents.get_text_embedding("dimension probe"))
        build_vector_index(
            nodes, documents, work / "dense", show_progress, make_faiss_index(dimensions, kind, settings), known.chunks
        )
        pause_point(settings, "embedding")
        np.save(work / "sentences.npy", _embed_sentences(documents, sentences, known.sentences, show_progress))
        if multilingual is not None:
            build_vector_index(
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
            "index_kind": kind,
            "query_encoder": "onnx" if query_encoder else "sentence-transformers",
            "seed_files": corpus.files,
            "built_from": previous.path.name if previous is not None else None,
            "embedded": embedded,
            "embedded_on": "ray" if remote is not None else "this process",
            "build_seconds": round(time.perf_counter() - started, 2),
        }
        pause_point(settings, "writing")
        final = folders.seal(work, manifest, linked)
    pause_point(settings, "before-publish")
    with folders.writing(root):
        folders.publish(root, final)
    return final


def _write_contents(work: Path, corpus: Corpus, nodes: list, sentences: list[Sentence], settings: Settings) -> dict:
    """BM25 over every chunk and the paper and sentence tables, for a build or an add; returns
    what the manifest records of them."""
    from llama_index.retrievers.bm25 import BM25Retriever

    BM25Retriever.from_defaults(nodes=nodes, similarity_top_k=settings.candidates).persist(
        str(work / "bm25"), show_progress=False
    )
    _write_tables(work, corpus, sentences)
    (work / CHUNKS).write_text(
        json.dumps({"ids": [n.id_ for n in nodes], "papers": [n.metadata["paper_id"] for n in nodes]})
    )
    return {
        "corpus_hash": corpus.content_hash,
        "papers": len(corpus),
        "chunks": len(nodes),
        "sentences": len(sentences),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _write_tables(work: Path, corpus: Corpus, sentences: list[Sentence]) -> None:
    Lexicon.count(corpus.papers, (s.text for s in sentences)).save(work / LEXICON)
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
