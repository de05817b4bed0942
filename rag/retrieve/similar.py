"""Papers like a given paper: its nearest papers by their vectors, each with the pair of
sentences that ties the two (the most similar sentence of each abstract), from the sentence
vectors the index stores. Read through the `SearchIndex` contract, so any store serves it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from rag.common.errors import PaperNotFoundError
from rag.index.stores.base import nearest_papers
from rag.index.topics import paper_vectors

if TYPE_CHECKING:
    from rag.common.settings import Settings
    from rag.index.corpus import Paper
    from rag.index.stores.base import SearchIndex, SentenceRows


@dataclass(frozen=True)
class Similar:
    paper: Paper
    score: float  # cosine of the two papers' vectors (the means of their sentence vectors)
    sentence: str  # of the paper asked about...
    other_sentence: str  # ...and of this one: the closest pair of sentences of the two abstracts
    sentence_score: float  # their cosine


def _vector(rows: SentenceRows) -> np.ndarray:
    return paper_vectors(np.asarray(rows.vectors, np.float32), [len(rows.texts)])[0]


def similar_papers(index: SearchIndex, paper_id: str, k: int, settings: Settings) -> list[Similar]:
    """The `k` papers nearest to `paper_id`, closest first. Candidates come from the index's
    dense search of its chunks (2k papers, so the cost does not grow with the corpus), then are
    ranked by the cosine of the papers' vectors."""
    if index.corpus.get(paper_id) is None:
        raise PaperNotFoundError(f"no paper with id {paper_id!r}")
    own = index.sentences_of([paper_id])[paper_id]
    if not own.texts:
        return []
    vector = _vector(own)
    candidates = nearest_papers(index, vector, 2 * k, settings, exclude=[paper_id])
    rows = index.sentences_of([c.paper_id for c in candidates])
    found = []
    for candidate in candidates:
        other, paper = rows[candidate.paper_id], index.corpus.get(candidate.paper_id)
        if paper is None or not other.texts:
            continue
        pairs = np.asarray(own.vectors, np.float32) @ np.asarray(other.vectors, np.float32).T
        mine, theirs = np.unravel_index(int(np.argmax(pairs)), pairs.shape)
        found.append(
            Similar(
                paper,
                round(float(vector @ _vector(other)), 4),
                own.texts[mine],
                other.texts[theirs],
                round(float(pairs[mine, theirs]), 4),
            )
        )
    return sorted(found, key=lambda s: -s.score)[:k]
