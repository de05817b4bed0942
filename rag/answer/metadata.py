"""Answers to questions about authors (rag/query/authorship.py), from the corpus's metadata only:
an abstract never says who wrote it, so where the corpus records no authors the answer says so
and guesses nothing. Every citation here is a paper the metadata picks, so it is built directly,
not checked against sentences as a generated answer's are."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from rag.answer import prompts
from rag.answer.citations import Citation
from rag.common.text import CONTRIBUTION
from rag.index.chunking import split_sentences
from rag.index.corpus import Paper
from rag.judge.verdict import Confidence


@dataclass(frozen=True)
class MetadataAnswer:
    text: str
    citations: list[Citation]
    confidence: Confidence  # high: the metadata answers it; low: the paper is known, its authors not; none: nothing
    missing: str | None = None


def papers_by(name: str, papers: Sequence[Paper], recorded: bool) -> MetadataAnswer:
    """ "Which papers are by NAME?": `papers`, those the metadata says are (any number), each with
    the sentence that says what it contributes; `recorded`: whether the corpus records authors."""
    if not recorded:
        return MetadataAnswer(prompts.NO_AUTHORS_BY.format(name=name), [], "none")
    if not papers:
        return MetadataAnswer(prompts.NONE_BY.format(name=name), [], "none")
    citations = [_cited(n, paper) for n, paper in enumerate(papers, start=1)]
    lines = [
        f"- **{c.name}** ({', '.join(p.authors)}) [{c.n}]: {c.snippet}" for c, p in zip(citations, papers, strict=True)
    ]
    return MetadataAnswer(prompts.BY.format(name=name) + "\n\n" + "\n".join(lines), citations, "high")


def written_by(paper: Paper) -> MetadataAnswer:
    """ "Who wrote X?", X being `paper` (the one named, else the best retrieved)."""
    citation = _cited(1, paper)
    if not paper.authors:
        return MetadataAnswer(prompts.NO_AUTHORS_WHO.format(name=citation.name), [citation], "low", "its authors")
    authors = ", ".join(paper.authors[:-1]) + (" and " if len(paper.authors) > 1 else "") + paper.authors[-1]
    return MetadataAnswer(prompts.WRITTEN_BY.format(name=citation.name, authors=authors), [citation], "high")


def _cited(n: int, paper: Paper) -> Citation:
    sentences = [s.text for s in split_sentences(paper)] or [paper.text]
    snippet = next((s for s in sentences if CONTRIBUTION.search(s)), sentences[0])
    return Citation(n, paper.paper_id, paper.display_name, paper.text, snippet, paper.code_url, list(paper.authors))
