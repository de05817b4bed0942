"""The map, the topics and the similar papers, computed when indexing the real corpus and read
through the store contract; `rag add` placing a new paper, run as a user runs it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from rag.common.settings import Settings
from rag.index.corpus import load_corpus
from rag.index.stores.base import nearest_papers
from rag.index.stores.faiss import build_index, load_index
from rag.index.topics import (
    GENERIC_NOUNS,
    GENERIC_WORDS,
    OTHER_LABEL,
    TopicMap,
    _labels,
    fit_map,
    paper_vectors,
    topic_counts,
    topics_of,
)
from rag.retrieve.similar import similar_papers

from .conftest import ROOT, SEEDS, small_settings

SPEED_UPS = {"SPEED", "dLLM-Cache", "LoSA", "Jacobi Forcing"}  # diffusion language models, decoded faster
# Seeds of one subject each, the subjects unrelated: each a topic of its own (k-means of the 2-D
# places put the quantisation papers in the speed-ups' topic)
SUBJECTS = {
    "decoding diffusion language models faster": SPEED_UPS,
    "quantisation": {"ImpQuant", "LSGQuant", "ProjQ"},
    "proteins": {"ProtDiS", "MMM-PPI", "GeoCoupling"},
    "optimisers": {
        "FSBA",
        "Stochastic Frank-Wolfe is a classical optimization method for…",
        "This paper studies the AdamW-style Shampoo optimizer, an…",
    },
    "attacks on models": {"RAI", "RLCracker", "MemPot"},
    "medical data": {"MedScope", "MedMosaic", "RoVTL"},
}


def by_name(index, name: str):
    [paper] = [p for p in index.corpus.papers if p.name == name]
    return paper


def test_every_paper_has_a_place_and_a_topic_and_every_topic_a_label(loaded_index):
    topic_map = loaded_index.topic_map
    assert list(topic_map.places) == [p.paper_id for p in loaded_index.corpus.papers]
    assert all(0 <= p.x <= 1 and 0 <= p.y <= 1 for p in topic_map.places.values())
    xs = [p.x for p in topic_map.places.values()]
    assert min(xs) == 0 and max(xs) == 1  # scaled into the unit square, not collapsed
    sizes = topic_map.sizes()
    assert [t.id for t in topic_map.topics] == list(range(len(topic_map.topics))) and len(topic_map.topics) >= 5
    assert all(sizes[t.id] >= 1 for t in topic_map.topics) and sum(sizes.values()) == 86
    labels = [t.label for t in topic_map.topics]
    assert len(set(labels)) == len(labels), labels
    # the papers no topic fits, if any, make the last topic, named as such
    named, other = [t for t in topic_map.topics if not t.other], [t for t in topic_map.topics if t.other]
    assert topic_map.topics[len(named) :] == other and len(other) <= 1
    assert all(t.label == OTHER_LABEL and t.words == [] for t in other)
    for topic in named:
        assert topic.label == ", ".join(topic.words[:3]) and len(topic.words) >= 3
        # distinctive words and phrases, not the boilerplate every abstract has
        words = {word for term in topic.words for word in term.split()}
        assert not ({"propose", "method", "results", "novel", "performance"} | GENERIC_WORDS) & words, topic
        assert not {term.split()[0] for term in topic.words} & GENERIC_NOUNS, topic  # 'models' only ends one
        members = [p.text.lower() for p in loaded_index.corpus.papers if topic_map.places[p.paper_id].topic == topic.id]
        assert all(any(word in text for text in members) for word in topic.words), topic


LABELLED = [
    # topic 0: the KV cache of diffusion language models, in three papers
    "We propose a novel method that compresses the KV cache of diffusion language models. Results show a KV "
    "cache half as large.",
    "Our approach evicts KV cache entries of diffusion language models; the KV cache shrinks fourfold.",
    "A KV cache for diffusion language models that we show is exact, with KV reuse across steps.",
    # topic 1: adversarial attacks on vision transformers, in three papers
    "We propose adversarial attacks on vision transformers; the attacks transfer across vision transformers.",
    "Adversarial attacks fool vision transformers, and our method significantly improves robustness to them.",
    "A defence against adversarial attacks for vision transformers with state-of-the-art results.",
]


def test_a_label_is_the_phrases_several_of_its_papers_share_not_their_boilerplate():
    settings = Settings(map_label_max_df=1.0)  # a corpus of six: every term is in a third of it at least
    topics = _labels(LABELLED, np.array([0, 0, 0, 1, 1, 1]), 2, settings)
    # 'kv' alone in a paper more than 'kv cache', but shown as the phrase that makes most of its uses;
    # an adjective ('adversarial') as a phrase; no word twice in a label, no 'propose' or 'results'
    assert topics[0].words[:2] == ["kv cache", "diffusion language models"], topics[0]
    assert topics[1].words[:2] == ["adversarial attacks", "vision transformers"], topics[1]
    for topic in topics:
        words = [word for term in topic.words for word in term.split()]
        assert len(words) == len(set(words)) and not set(words) & GENERIC_WORDS, topic


@pytest.mark.parametrize("papers", [1, 2, 3, 5, 12])
def test_a_corpus_of_a_few_papers_gets_a_map_too(corpus, papers):
    chosen = corpus.papers[:papers]
    vectors = np.random.default_rng(papers).standard_normal((papers, 384)).astype(np.float32)
    fitted = fit_map(chosen, vectors / np.linalg.norm(vectors, axis=1, keepdims=True), Settings())
    assert list(fitted.places) == [p.paper_id for p in chosen]
    assert all(0 <= p.x <= 1 and 0 <= p.y <= 1 for p in fitted.places.values())
    assert {p.topic for p in fitted.places.values()} <= {t.id for t in fitted.topics}
    named = [t for t in fitted.topics if not t.other]
    assert all(t.label for t in fitted.topics) and len(named) <= max(topic_counts(papers, Settings()))
    assert fitted.topics[len(named) :] == [t for t in fitted.topics if t.other]  # the papers no topic fits: last
    assert set(fitted.sizes()) == {t.id for t in fitted.topics}  # no topic without papers
    assert fit_map([], np.zeros((0, 384), np.float32), Settings()) == TopicMap.empty()


def test_seeds_of_one_subject_share_a_topic_and_unrelated_subjects_do_not(loaded_index):
    places = loaded_index.topic_map.places
    topics = {
        subject: {places[by_name(loaded_index, name).paper_id].topic for name in names}
        for subject, names in SUBJECTS.items()
    }
    assert all(len(found) == 1 for found in topics.values()), topics
    assert len(set.union(*topics.values())) == len(SUBJECTS), topics
    assert not any(loaded_index.topic_map.topics[t].other for t in set.union(*topics.values())), topics


@pytest.mark.parametrize("agglomerative_up_to", [5_000, 2], ids=["ward", "spherical k-means"])
def test_topics_are_the_groups_of_the_vectors_in_the_best_separated_count(agglomerative_up_to):
    vectors, group = six_groups(lone=0)  # 60 papers: 6 to 23 topics are tried
    topics = topics_of(vectors, Settings(map_agglomerative_up_to=agglomerative_up_to))
    assert topic_counts(60, Settings())[0] == 6 and len(set(topics)) == 6, topics  # the six, not the most allowed
    assert all(len(set(topics[group == g])) == 1 for g in range(6)), topics
    assert list(np.bincount(topics)) == [10] * 6  # none set apart: each paper has its group


def six_groups(lone: int) -> tuple[np.ndarray, np.ndarray]:
    """Unit vectors of six groups of ten papers (cosine to their centre about 0.9), then `lone`
    papers each alone in its direction; and the group of each of the sixty."""
    rng = np.random.default_rng(7)
    centres = rng.standard_normal((6, 384))
    group = np.repeat(np.arange(6), 10)
    vectors = np.vstack([centres[group] + rng.standard_normal((60, 384)) * 0.5, rng.standard_normal((lone, 384))])
    return vectors / np.linalg.norm(vectors, axis=1, keepdims=True), group


def test_papers_without_a_sibling_subject_are_set_apart_and_the_subjects_kept_whole():
    """Clustering has to put the lone papers somewhere (the topics before this step made them a
    topic of their own); they are set apart (-1), and each group stays one topic without them.
    Ward's path, that of corpora up to 5,000 papers (FAISS's k-means on 75 papers puts a lone
    paper or two in a group)."""
    vectors, group = six_groups(lone=15)
    topics = topics_of(vectors, Settings())
    assert list(topics[60:]) == [-1] * 15, topics
    assert all(len(set(topics[:60][group == g])) == 1 for g in range(6)), topics
    assert sorted(topics[:60][group == g][0] for g in range(6)) == list(range(6)), topics


def test_the_diffusion_language_model_speed_ups_are_one_topic_and_each_others_neighbours(loaded_index, settings):
    topic_map = loaded_index.topic_map
    papers = {name: by_name(loaded_index, name) for name in SPEED_UPS}
    assert len({topic_map.places[p.paper_id].topic for p in papers.values()}) == 1
    jacobi = similar_papers(loaded_index, papers["Jacobi Forcing"].paper_id, 3, settings)
    assert {s.paper.name for s in jacobi} == SPEED_UPS - {"Jacobi Forcing"}
    for name, paper in papers.items():
        found = similar_papers(loaded_index, paper.paper_id, 5, settings)
        assert len(found) == 5 and paper.paper_id not in {s.paper.paper_id for s in found}
        assert [s.score for s in found] == sorted((s.score for s in found), reverse=True)
        assert len({s.paper.name for s in found} & SPEED_UPS) >= 2, (name, [s.paper.name for s in found])


def test_the_sentence_pair_is_the_closest_pair_of_the_two_abstracts(loaded_index, settings):
    protdis = by_name(loaded_index, "ProtDiS")
    found = similar_papers(loaded_index, protdis.paper_id, 3, settings)
    assert {"MMM-PPI", "GeoCoupling"} <= {s.paper.name for s in found}  # the other protein papers
    for similar in found:
        rows = loaded_index.sentences_of([protdis.paper_id, similar.paper.paper_id])
        ours, theirs = rows[protdis.paper_id], rows[similar.paper.paper_id]
        cosines = np.asarray(ours.vectors) @ np.asarray(theirs.vectors).T
        i, j = np.unravel_index(int(np.argmax(cosines)), cosines.shape)
        assert (similar.sentence, similar.other_sentence) == (ours.texts[i], theirs.texts[j])
        assert similar.sentence in protdis.text and similar.other_sentence in similar.paper.text
        assert abs(similar.sentence_score - float(cosines[i, j])) < 1e-3
        vectors = paper_vectors(np.vstack([ours.vectors, theirs.vectors]), [len(ours.texts), len(theirs.texts)])
        assert abs(similar.score - float(vectors[0] @ vectors[1])) < 1e-3


TURBO = (
    "Added papers\n\nDiffusion large language models decode slowly because they unmask only a few tokens per "
    "denoising step. We introduce TurboUnmask, a training-free decoding scheme for diffusion language models "
    "that caches the key-value states of stable tokens and unmasks several confident tokens in parallel at each "
    "step. TurboUnmask speeds up inference of LLaDA and Dream by 4.1 times on math and coding benchmarks "
    "with no loss of accuracy.\n"
)


def test_rag_add_places_the_new_paper_among_its_neighbours_and_moves_no_other(tmp_path):
    seeds = tmp_path / "seeds"
    shutil.copytree(SEEDS, seeds)
    # The layout of large corpora, on the seeds: the one test of UMAP's path. The builds run in
    # this process (UMAP's numba functions compile once per process); the add runs as a user runs it.
    settings = small_settings(tmp_path, seeds).model_copy(update={"map_umap_above": 50})
    env = {**os.environ, "RAG_INDEX_DIR": str(settings.indexing.index_dir), "RAG_SEEDS_DIR": str(seeds)}
    env["RAG_MULTILINGUAL"] = "false"
    env["RAG_MAP_UMAP_ABOVE"] = "50"

    build_index(load_corpus(seeds), settings)
    before = load_index(settings)
    (tmp_path / "turbo.txt").write_text(TURBO)
    added = subprocess.run(
        [sys.executable, "-m", "server.cli", "add", str(tmp_path / "turbo.txt")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert added.returncode == 0, added.stderr[-3000:]
    after = load_index(settings)
    [new] = [p for p in after.corpus.papers if before.corpus.get(p.paper_id) is None]
    assert new.name == "TurboUnmask"
    assert after.manifest["built_from"] == before.path.name  # an add, not a rebuild
    assert after.topic_map.topics == before.topic_map.topics
    assert {pid: p for pid, p in after.topic_map.places.items() if pid != new.paper_id} == before.topic_map.places

    place = after.topic_map.places[new.paper_id]
    jacobi = by_name(before, "Jacobi Forcing")
    assert place.topic == before.topic_map.places[jacobi.paper_id].topic  # the speed-ups' topic
    rows = after.sentences_of([new.paper_id])[new.paper_id]
    vector = paper_vectors(np.asarray(rows.vectors), [len(rows.texts)])[0]
    near = nearest_papers(before, vector, settings.map.neighbours, settings)
    assert len(SPEED_UPS & {before.corpus.get(n.paper_id).name for n in near[:6]}) >= 3
    spots = [before.topic_map.places[n.paper_id] for n in near]
    assert min(s.x for s in spots) <= place.x <= max(s.x for s in spots)
    assert min(s.y for s in spots) <= place.y <= max(s.y for s in spots)

    build_index(load_corpus(seeds), settings)  # a full rebuild fits the map again, the new paper in it
    rebuilt = load_index(settings)
    assert rebuilt.manifest["built_from"] is None and new.paper_id in rebuilt.topic_map.places
    assert {pid: p for pid, p in rebuilt.topic_map.places.items() if pid != new.paper_id} != before.topic_map.places
    stored = json.loads((rebuilt.path / "map.json").read_text())
    assert len(stored["x"]) == len(rebuilt.corpus) == 87
