"""The sentence table of a FAISS build: which rows of the sentence vectors are each paper's, and
where each sentence is in its abstract.

No sentence text is stored: a sentence is a span of its paper's text (`chunking.split_sentences`),
so the table is two integer arrays (`sentences.npz`) instead of 730,000 strings at 100,000
papers. A replica reads it in milliseconds and holds a few megabytes, and the text of a sentence
is cut from its abstract when a question retrieves that paper.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from rag.index.chunking import Sentence
from rag.index.corpus import Paper

SENTENCES = "sentences.npz"


@dataclass(frozen=True)
class SentenceTable:
    """Each paper's rows (a paper's sentences are contiguous, papers in corpus order) and every
    sentence's character span in its paper's text."""

    rows: dict[str, slice]
    spans: np.ndarray  # (sentences, 2) int32: start and end in the abstract

    @classmethod
    def of(cls, papers: list[Paper], spans: list[np.ndarray]) -> SentenceTable:
        """`spans`: each paper's sentence spans, in the order of `papers`."""
        rows, start = {}, 0
        for paper, own in zip(papers, spans, strict=True):
            rows[paper.paper_id] = slice(start, start + len(own))
            start += len(own)
        return cls(rows, np.concatenate(spans).astype(np.int32) if spans else np.zeros((0, 2), np.int32))

    def __len__(self) -> int:
        return len(self.spans)

    def texts(self, paper: Paper) -> list[str]:
        return [paper.text[start:end] for start, end in self.spans[self.rows.get(paper.paper_id, slice(0, 0))]]

    def counts(self, papers: Iterable[Paper]) -> list[int]:
        """How many sentences each of `papers` has."""
        return [(rows := self.rows.get(p.paper_id, slice(0, 0))).stop - rows.start for p in papers]

    def sentences(self, papers: Iterable[Paper]) -> list[Sentence]:
        return [
            Sentence(paper.paper_id, paper.text[start:end], (int(start), int(end)))
            for paper in papers
            for start, end in self.spans[self.rows.get(paper.paper_id, slice(0, 0))]
        ]

    def save(self, path: Path, papers: list[Paper]) -> None:
        counts = np.asarray(self.counts(papers), np.int32)
        with path.open("wb") as f:
            np.savez(f, counts=counts, spans=self.spans)

    @classmethod
    def load(cls, path: Path, papers: list[Paper]) -> SentenceTable:
        with np.load(path) as stored:
            counts, spans = stored["counts"], stored["spans"]
        if len(counts) != len(papers) or int(counts.sum()) != len(spans):
            raise ValueError(f"{path}: {len(counts)} papers and {len(spans)} sentences for {len(papers)} papers")
        ends = np.cumsum(counts).tolist()
        starts = [0, *ends][: len(ends)]
        return cls({p.paper_id: slice(s, e) for p, s, e in zip(papers, starts, ends, strict=True)}, spans)
