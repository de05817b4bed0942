"""The dev contrast pairs (eval/contrast.py): each twin changes one group member of its original
to a sibling, and no abstract of the corpus supports it; the committed file is what the script writes."""

from __future__ import annotations

import re
from collections import Counter

import pytest

from eval import contrast
from rag.evaluation.runs import load_questions


@pytest.fixture(scope="module")
def records(corpus):
    return load_questions(contrast.OUT, corpus)  # ids unique, gold papers real, keywords verbatim


@pytest.fixture(scope="module")
def vocabulary(corpus):
    return contrast.Vocabulary(corpus.papers)


def _words(text: str) -> list[str]:
    return re.findall(r"[^\W_]+|[^\w\s]", text.lower())


def _one_replaced(words: list[str], old: tuple[str, ...], new: tuple[str, ...]) -> list[list[str]]:
    """`words` with one occurrence of `old` replaced by `new` (any one), an "a"/"an" before it
    following `new`: the twins the change can describe."""
    made = []
    for i in range(len(words) - len(old) + 1):
        if tuple(words[i : i + len(old)]) == old:
            before = words[:i]
            if before and before[-1] in ("a", "an"):
                before = before[:-1] + ["an" if new[0][0] in "aeio" or new[0] in ("llm", "mlp", "rnn") else "a"]
            made.append(before + list(new) + words[i + len(old) :])
    return made


def _forms(klass: tuple[str, ...]) -> set[tuple[str, ...]]:
    """A class's forms as words, and hyphenated as a question may write them ("question-answering")."""
    variants = [variant for form in klass for variant in form.split("|")]
    return {tuple(_words(written)) for v in variants for written in (v, v.replace(" ", "-"))}


def test_the_committed_file_is_what_the_script_writes():
    assert contrast.OUT.read_text(encoding="utf-8") == contrast.render(contrast.generate())


def test_enough_pairs_over_many_groups(records):
    twins = [r for r in records if "contrast_of" in r]
    paraphrases = [r for r in records if "paraphrase_of" in r]
    assert len(twins) >= 80 and len(paraphrases) >= 40
    assert len(Counter(r["change"].split(":")[0] for r in twins)) >= 6
    assert len({r["id"] for r in records}) == len(records)


def test_every_twin_changes_one_group_member_of_its_original(records, corpus):
    by_id = {r["id"]: r for r in records}
    for twin in (r for r in records if "contrast_of" in r):
        original = by_id[twin["contrast_of"]]
        assert twin["type"] == "unanswerable" and twin["gold"] == [] and twin["answer_keywords"] == []
        assert twin.get("intent") == original.get("intent")
        label, _, words = twin["change"].partition(": ")
        old, new = (tuple(_words(side)) for side in words.split(" -> "))
        assert _words(twin["question"]) in _one_replaced(_words(original["question"]), old, new), twin["id"]
        # Members of two classes of one group of that label: the gold abstract mentions the
        # class replaced and not the one put in its place.
        gold = corpus.get(original["gold"][0]).text
        assert any(
            old in _forms(group.classes[a])
            and new in _forms(group.classes[b])
            and a != b
            and a in contrast.mentioned(gold, group)
            and b not in contrast.mentioned(gold, group)
            for group in contrast.GROUPS
            if group.label == label
            for a in range(len(group.classes))
            for b in range(len(group.classes))
        ), twin["change"]


def test_no_abstract_supports_a_twin(records, vocabulary):
    by_id = {r["id"]: r for r in records}
    for twin in (r for r in records if "contrast_of" in r):
        original = by_id[twin["contrast_of"]]
        found = vocabulary.twin_supporters(original["question"], original["gold"][0], twin["question"], twin["change"])
        assert found == [], (twin["id"], found)


@pytest.mark.parametrize(
    "original, gold, twin, change, supporter",
    [
        (  # LoSA itself runs sparse attention
            "What speedup over dense attention does LoSA achieve on RTX A6000 GPUs?",
            "b1bd949105b7",
            "What speedup over sparse attention does LoSA achieve on RTX A6000 GPUs?",
            "assumption: dense -> sparse",
            "b1bd949105b7",
        ),
        (  # dLLM-Cache's abstract contrasts dLLMs with autoregressive models
            "Which diffusion LLMs is dLLM-Cache evaluated on?",
            "65846cd55df9",
            "Which autoregressive LLMs is dLLM-Cache evaluated on?",
            "model family: diffusion -> autoregressive",
            "65846cd55df9",
        ),
    ],
)
def test_the_check_finds_an_abstract_that_supports_a_would_be_twin(vocabulary, original, gold, twin, change, supporter):
    assert supporter in vocabulary.twin_supporters(original, gold, twin, change)


def test_paraphrases_keep_their_originals_answer(records):
    by_id = {r["id"]: r for r in records}
    for p in (r for r in records if "paraphrase_of" in r):
        original = by_id[p["paraphrase_of"]]
        assert (p["gold"], p["answer_keywords"], p["type"]) == (
            original["gold"],
            original["answer_keywords"],
            original["type"],
        )
        assert p["question"] != original["question"]


def test_a_swap_keeps_number_article_and_acronyms():
    question = "Is there an LLM method for vision transformers?"
    matches = {contrast._flat(question[m.start : m.end]): m for m in contrast.find(question)}
    family = matches["llm"]
    vlm = next(k for k, klass in enumerate(family.group.classes) if klass[0].startswith("vision-language"))
    swapped = contrast.swap(question, family, vlm)
    assert swapped is not None and swapped[0] == "Is there a VLM method for vision transformers?"
    vit = matches["vision transformers"]
    swapped = contrast.swap(question, vit, 1)
    assert swapped is not None and swapped[0] == "Is there an LLM method for convolutional neural networks?"
