"""A short title for each paper whose abstract gives it no name, derived when indexing.

The KeyBERT idea with the bundled encoder: the abstract's noun phrases (spaCy's noun chunks, and
two joined by "of", "for", "in"... : "adversarial training under simplified ViT architectures")
are the candidates; the title is the one closest to the abstract's own vector and least close
to any other paper's (a phrase every paper shares names none of them), a little favoured when
it comes from the sentence that states the contribution ("we introduce ..."), held back when
only sentences on earlier work use it ("while previous explanations attribute ..."). Written by hand:
KeyBERT itself would bring its own model loading and candidate n-grams, not noun phrases.
The title is a phrase of the abstract, so it is grounded in it by construction. With
`RAG_TITLES=llm` an LLM also writes one (llm_titles.py), shown instead when it is grounded too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from rag.common.text import CONTRIBUTION, tagger
from rag.index import llm_titles

if TYPE_CHECKING:
    from llama_index.core.embeddings import BaseEmbedding

    from rag.common.groups import IndexingSettings
    from rag.common.settings import Settings
    from rag.index.corpus import Corpus, Paper
    from rag.index.llm_titles import TitleReport

_SKIPPED_TAGS = frozenset({"DET", "PRON", "NUM", "PUNCT", "SYM", "CCONJ"})
# Words that open a phrase without naming anything in it ("a novel ...", "existing ...").
_EMPTY_OPENERS = frozenset(
    "novel new existing standard proposed general simple effective popular remarkable improved principled "
    "practical key recent prior previous classical common typical various several different first".split()
)
_JOINS = frozenset({"of", "for", "in", "on", "under", "with", "via"})  # not "to", "from": verbs take them
_NOT_A_TITLE = re.compile(r"[$()\[\]{}/:;=]|https?:")
# What a paper does to its main object ("we introduce X", "we formalize X", "investigating X"):
# the verbs' stems, as spaCy's tagger leaves them unlemmatised.
_CONTRIBUTES = (
    "propos",
    "introduc",
    "present",
    "develop",
    "formaliz",
    "formalis",
    "investigat",
    "stud",
    "deriv",
    "establish",
    "design",
    "construct",
    "build",
    "releas",
    "creat",
    "uncover",
    "characteriz",
    "revisit",
)
# A sentence about earlier work or the field's common view, not this paper's: "While previous
# explanations attribute these phenomena to sharper loss landscapes, we show ...".
_BACKGROUND = re.compile(
    r"^(?:while|although|though|despite|however|prior|previous|existing|traditional|conventional)\b"
    r"|\b(?:previous|prior|existing|earlier) (?:work|works|methods|approaches|studies|explanations|analyses)\b",
    re.I,
)


class Found(NamedTuple):
    """Where a candidate phrase stands in its abstract."""

    contribution: bool  # in a sentence that states the contribution ("We propose ...")
    background: bool  # only in sentences on earlier work
    made: bool  # the object of a verb of contribution ("we introduce <it>")


def candidates(doc, max_words: int) -> dict[str, Found]:
    """The abstract's noun phrases and pairs of them joined by a preposition, with where they stand."""
    chunks = []
    for chunk in doc.noun_chunks:
        tokens = list(chunk)
        while tokens and (tokens[0].pos_ in _SKIPPED_TAGS or tokens[0].is_stop or tokens[0].lower_ in _EMPTY_OPENERS):
            tokens = tokens[1:]
        if tokens:
            chunks.append((tokens[0].i, tokens[-1].i + 1))
    spans = set(chunks)
    for start, end in chunks:
        for start2, end2 in chunks:
            if (
                end < start2 <= end + 2
                and end2 - start <= max_words
                and doc[end].lower_ in _JOINS
                and all(t.pos_ not in ("VERB", "PUNCT") for t in doc[end:start2])
            ):
                spans.add((start, end2))
    found: dict[str, Found] = {}
    for start, end in sorted(spans):
        span = doc[start:end]
        text = span.text
        if (
            len(span) > max_words
            or _NOT_A_TITLE.search(text)
            or any(t.pos_ == "PRON" or (t.like_num and not any(c.isalpha() for c in t.text)) for t in span)
        ):
            continue
        if len(span) < 2:
            continue  # one word ("robustness", "SAT") names a field, not a paper
        sentence = span.sent.text.strip()
        before = found.get(text, Found(False, True, False))
        found[text] = Found(
            before.contribution or bool(CONTRIBUTION.search(sentence)),
            before.background and bool(_BACKGROUND.search(sentence)),
            before.made or _made(doc, start),
        )
    return found


def _made(doc, start: int) -> bool:
    """The phrase at `start` is the object of a verb of contribution, past its determiners."""
    i = start - 1
    while i >= 0 and (doc[i].pos_ in _SKIPPED_TAGS or doc[i].lower_ in _EMPTY_OPENERS) and doc[i].pos_ != "PUNCT":
        i -= 1
    return i >= 0 and doc[i].pos_ == "VERB" and doc[i].lower_.startswith(_CONTRIBUTES)


def derive_titles(
    papers: Sequence[Paper],
    vectors: np.ndarray,
    contrast: np.ndarray,
    encoder: BaseEmbedding,
    settings: IndexingSettings,
    model: str,
) -> dict[str, str]:
    """A title for each of `papers` (by id); row i of `vectors` is paper i's vector (the mean of
    its sentences', as the index keeps it), `contrast` the vectors of other papers of the corpus
    (a row as close as 0.9999 to the paper is itself, and left out). A phrase is measured against
    the abstract's own embedding (one per paper titled), which reads it whole."""
    own_vectors, others = _unit(vectors), _unit(contrast) if len(contrast) else np.zeros((0, vectors.shape[1]))
    whole = _unit(encoder.get_text_embedding_batch([p.text for p in papers]))
    titles = {}
    for i, (paper, doc) in enumerate(zip(papers, tagger(model).pipe(p.text for p in papers), strict=True)):
        found = candidates(doc, settings.title_max_words)
        if not found:
            continue
        phrases = list(found)
        embedded = _unit(encoder.get_text_embedding_batch(phrases))
        rest = others[others @ own_vectors[i] < 0.9999]
        rest = np.concatenate([rest, np.delete(own_vectors, i, axis=0)])
        closest_other = (embedded @ rest.T).max(axis=1) if len(rest) else np.zeros(len(phrases))
        bonus = np.array(
            [
                settings.title_contribution_bonus * where.contribution
                + settings.title_object_bonus * where.made
                - settings.title_background_penalty * where.background
                for where in (found[p] for p in phrases)
            ]
        )
        score = embedded @ whole[i] - settings.title_distinct_weight * closest_other + bonus
        best = phrases[int(np.argmax(score))]
        titles[paper.paper_id] = best[0].upper() + best[1:]
    return titles


def contrast_rows(count: int, settings: Settings) -> np.ndarray:
    """Which of `count` papers a title is told apart from: all, or a seeded sample of
    `title_contrast_papers` (what deriving costs stays bounded at any corpus size)."""
    if count <= settings.indexing.title_contrast_papers:
        return np.arange(count)
    return np.sort(np.random.default_rng(0).choice(count, settings.indexing.title_contrast_papers, replace=False))


def title_unnamed(
    papers: Sequence[Paper],
    vectors: np.ndarray,
    contrast: np.ndarray,
    encoder: BaseEmbedding,
    settings: Settings,
    known: Corpus | None = None,
) -> TitleReport | None:
    """Give each of `papers` (row i of `vectors` is paper i's) that has neither a name nor a title
    its derived title, and with `titles` llm its LLM's title: those the previous build (`known`)
    gave it, so that a title never changes under a reader, else new ones (a derived title told
    apart from `contrast`, other papers' vectors). Returns what the LLM was asked (None: not asked)."""
    new = []
    for i, paper in enumerate(papers):
        if paper.named or paper.title or paper.derived_title or paper.llm_title:
            continue
        kept = known.get(paper.paper_id) if known is not None else None
        if kept is not None and (kept.derived_title or kept.llm_title):
            paper.derived_title, paper.llm_title = kept.derived_title, kept.llm_title
        else:
            new.append(i)
    chosen = [papers[i] for i in new]
    if chosen:
        derived = derive_titles(
            chosen, vectors[new], contrast, encoder, settings.indexing, settings.judging.tagger_model
        )
        for paper in chosen:
            paper.derived_title = derived.get(paper.paper_id)
    return llm_titles.write_titles(chosen, settings) if settings.indexing.titles == "llm" else None


def _unit(vectors) -> np.ndarray:
    array = np.asarray(vectors, dtype=np.float32)
    return array / np.maximum(np.linalg.norm(array, axis=1, keepdims=True), 1e-12)
