"""The store contract, the same checks on every store: FAISS build folders and a real Milvus
Lite server on loopback, driven through `rag.index.stores` as the CLI and the service drive them."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from rag.common.errors import CorpusError, IndexStaleError
from rag.common.settings import Settings
from rag.index.chunking import split_sentences
from rag.index.corpus import load_corpus
from rag.index.lexicon import Lexicon
from rag.index.stores import add_seed_texts, index_seeds, load_index, open_index, store_for
from rag.index.stores.base import Ranked, nearest_papers
from rag.index.topics import paper_vectors, place

from .conftest import SEEDS, MilvusServer

TWO_FILES = sorted(SEEDS.glob("*.txt"))[:2]
THIRD_FILE = sorted(SEEDS.glob("*.txt"))[2]  # 19 abstracts the two files lack


def new_abstract(tag: str) -> bytes:
    return (
        f"Added papers\n\nWe introduce Wombat{tag}, a scheduler that orders the microbatches of pipeline-parallel "
        f"training by their expected memory peak. Wombat{tag} cuts activation memory by a third on 64 GPUs "
        f"without slowing training, and we release the scheduler.\n"
    ).encode()


@pytest.fixture(scope="module", params=["faiss", "milvus"])
def settings(request, tmp_path_factory) -> Settings:
    """An index of two seed files in each store, built once for the module's tests."""
    root = tmp_path_factory.mktemp(request.param)
    seeds = root / "seeds"
    seeds.mkdir()
    for path in TWO_FILES:
        shutil.copy(path, seeds / path.name)
    extra: dict = {}
    if request.param == "milvus":
        pytest.importorskip("pymilvus")
        server = MilvusServer(root / "milvus")
        request.addfinalizer(server.stop)
        extra = {"milvus_uri": server.uri, "milvus_collection": "contract"}
    # Built 16 papers at a time, into HNSW: the contract holds for streamed builds.
    settings = Settings(
        index_dir=root / "index",
        seeds_dir=seeds,
        multilingual=False,
        vector_store=request.param,
        build_batch=16,
        hnsw_above=10,
        **extra,
    )
    index_seeds(settings)
    return settings


def test_a_build_holds_every_seed_paper_once_in_order(settings):
    index = open_index(settings)
    seeds = load_corpus(settings.indexing.seeds_dir)
    assert [p.paper_id for p in index.corpus.papers] == [p.paper_id for p in seeds.papers]
    assert index.store == settings.store.vector_store and index.chunks >= len(seeds)
    assert index.is_current() and index.version and str(index.path)


def test_rankings_and_sentences_come_from_the_papers(settings):
    index = load_index(settings)
    paper = index.corpus.papers[3]
    sentence = split_sentences(paper)[1].text
    dense = index.dense_ranking(index.embedder.get_query_embedding(sentence), 5, multilingual=False)
    words = index.bm25_ranking(sentence, 5)
    for ranking in (dense, words):
        assert all(isinstance(r, Ranked) for r in ranking) and ranking[0].paper_id == paper.paper_id
        assert [r.score for r in ranking] == sorted((r.score for r in ranking), reverse=True)
    rows = index.sentences_of([paper.paper_id])[paper.paper_id]
    assert rows.texts == [s.text for s in split_sentences(paper)]
    assert rows.vectors.shape[0] == len(rows.texts) and rows.multilingual is None
    sentences = [s.text for p in index.corpus.papers for s in split_sentences(p)]
    assert index.lexicon == Lexicon.count(index.corpus.papers, sentences)  # what the statistics read


def test_rankings_within_chosen_papers_hold_only_them_however_far_from_the_query(settings):
    """The store filters a scope itself, dense and BM25 alike; the FAISS build here is HNSW (its
    vectors are over `hnsw_above`), whose own filtered search would miss a paper far from the query."""
    index = load_index(settings)
    near = index.corpus.papers[3]
    sentence = split_sentences(near)[1].text
    vector = index.embedder.get_query_embedding(sentence)
    everything = index.dense_ranking(vector, index.chunks, multilingual=False)
    far = everything[-1].paper_id  # the paper of the chunk least like the question
    chosen = {near.paper_id, far}
    assert {r.paper_id for r in index.dense_ranking(vector, 5, multilingual=False)}.isdisjoint({far})
    alone = index.dense_ranking(vector, 5, multilingual=False, within=[far])
    assert alone and {r.paper_id for r in alone} == {far}
    dense = index.dense_ranking(vector, 50, multilingual=False, within=chosen)
    assert dense[0].paper_id == near.paper_id and {r.paper_id for r in dense} == chosen
    assert [r.score for r in dense] == sorted((r.score for r in dense), reverse=True)
    assert {r.paper_id for r in index.bm25_ranking(sentence, 50)} - chosen  # unscoped, other papers match
    words = index.bm25_ranking(sentence, 50, within=chosen)
    assert words[0].paper_id == near.paper_id and {r.paper_id for r in words} <= chosen


def test_every_paper_has_a_place_on_the_map_and_a_labelled_topic(settings):
    index = load_index(settings)
    places, topics = index.topic_map.places, index.topic_map.topics
    assert sorted(places) == sorted(p.paper_id for p in index.corpus.papers)
    assert all(0 <= p.x <= 1 and 0 <= p.y <= 1 for p in places.values())
    assert {p.topic for p in places.values()} == {t.id for t in topics} and len(topics) >= 3
    assert all(t.label and (t.words or t.other) for t in topics)  # the papers no topic fits: no words


def test_an_add_is_published_whole_and_once(settings):
    before = load_index(settings)
    added = add_seed_texts(settings, [("wombat.txt", new_abstract(settings.store.vector_store))])
    assert len(added.added) == 1 and not added.duplicates and added.build is not None
    assert not before.is_current()  # readers see that a newer state was published
    after = load_index(settings)
    new = added.added[0].paper_id
    assert after.corpus.get(new) is not None
    assert len(after.corpus) == len(before.corpus) + 1
    assert after.lexicon.papers == before.lexicon.papers + 1  # the added paper's words are counted
    # placed among its nearest papers, as rag.index.topics places a paper, and no other paper moved
    assert {pid: p for pid, p in after.topic_map.places.items() if pid != new} == before.topic_map.places
    assert after.topic_map.topics == before.topic_map.topics
    rows = after.sentences_of([new])[new]
    vector = paper_vectors(np.asarray(rows.vectors), [len(rows.texts)])[0]
    near = nearest_papers(before, vector, settings.map.neighbours, settings, exclude=[new])  # Milvus: live
    expected = place(near, before.topic_map.places)
    got = after.topic_map.places[new]
    assert got.topic == expected.topic and abs(got.x - expected.x) < 1e-3 and abs(got.y - expected.y) < 1e-3
    again = add_seed_texts(settings, [("again.txt", new_abstract(settings.store.vector_store))])
    assert again.build is None and not again.added and len(again.duplicates) == 1
    assert load_index(settings).version == after.version


def test_a_bad_file_is_refused_before_anything_is_written(settings):
    before = load_index(settings)
    with pytest.raises(CorpusError, match="bad.txt"):
        add_seed_texts(settings, [("bad.txt", b"\x00\x01binary")])
    assert load_index(settings).version == before.version
    assert not [
        p.name for p in Path(settings.indexing.seeds_dir).iterdir() if p.name.startswith(".")
    ]  # nothing pending


def test_catch_up_embeds_the_difference_and_a_rebuild_keeps_adds(settings):
    store = store_for(settings)
    kept = add_seed_texts(settings, [("kept.txt", new_abstract(f"kept-{settings.store.vector_store}"))]).added[0]
    seeds = Path(settings.indexing.seeds_dir)
    shutil.copy(THIRD_FILE, seeds / THIRD_FILE.name)
    try:
        assert store.seeds_changed(settings, load_index(settings)) == (not store.records_adds)
        before = load_index(settings).topic_map.places
        caught = index_seeds(settings, only_if_stale=True)
        assert caught.caught_up and (caught.added, caught.removed) == (19, 0), caught
        places = load_index(settings).topic_map.places
        assert len(places) == len(before) + 19 and all(places[pid] == p for pid, p in before.items())
        assert index_seeds(settings, only_if_stale=True).build is None  # up to date
    finally:
        (seeds / THIRD_FILE.name).unlink()
    removed = index_seeds(settings, only_if_stale=True)
    assert removed.caught_up and (removed.added, removed.removed) == (0, 19), removed
    rebuilt = index_seeds(settings)
    assert not rebuilt.caught_up and rebuilt.build is not None
    index = load_index(settings)
    assert index.corpus.get(kept.paper_id) is not None  # a full rebuild keeps what was added
    assert kept.paper_id in index.topic_map.places  # and maps it
    assert len({p.paper_id for p in index.corpus.papers}) == len(index.corpus)


def test_an_index_built_with_another_chunking_is_stale(settings):
    with pytest.raises(IndexStaleError, match="chunk_size"):
        load_index(settings.model_copy(update={"chunk_size": 128}))
