"""Question -> ranked papers: dense and BM25 chunk rankings fused by reciprocal rank, per paper.

The fusion is written here rather than with LlamaIndex's QueryFusionRetriever because we need
per-question weights (BM25 is noise for a question in another language and must not drown the dense signal)
and the raw dense cosine of each paper, which decides abstention; QueryFusionRetriever keeps
neither. The retrievers themselves are LlamaIndex's.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace

import numpy as np

from rag.common.errors import PaperNotFoundError, QueryError, ScopeError
from rag.common.limits import MAX_K, MAX_SCOPE_PAPERS
from rag.common.settings import Settings
from rag.common.text import NEW_WORK, stems
from rag.index.corpus import Paper
from rag.index.lexicon import NameFinder
from rag.index.stores.base import Ranked, SearchIndex, SentenceRows
from rag.index.vocabulary import Vocabulary
from rag.query.analysis import read_query
from rag.query.words import Reading


@dataclass
class Hit:
    paper: Paper
    rank: int
    score: float  # fused reciprocal-rank score
    dense_score: float  # best cosine between the question and one of the paper's chunks
    snippet: str  # the paper's sentence closest to the question
    sentence_scores: dict[str, float]  # every sentence of the paper -> cosine with the question
    sentences: SentenceRows  # the paper's sentences and their vectors (citations are checked against them)

    def to_dict(self) -> dict:
        return {
            "paper_id": self.paper.paper_id,
            "rank": self.rank,
            "score": round(self.score, 6),
            "dense_score": round(self.dense_score, 4),
            "name": self.paper.display_name,
            "text": self.paper.text,
            "code_url": self.paper.code_url,
            "snippet": self.snippet,
        }


def by_any(paper: Paper, authors: Collection[str]) -> bool:
    """The paper has an author whose name holds one of `authors` as whole words, in any case:
    "Hinton" and "geoffrey hinton" both find Geoffrey Hinton's papers; "Hint" finds none."""
    names = [" ".join(a.lower().split()) for a in paper.authors]
    asked = [" ".join(a.lower().split()) for a in authors]
    return any(re.search(rf"(?<!\w){re.escape(a)}(?!\w)", name) for a in asked if a for name in names)


@dataclass
class Retrieval:
    query: str
    multilingual: bool  # answered through the multilingual model
    hits: list[Hit]
    vector: np.ndarray  # the query's embedding (multilingual-e5's when `multilingual`)


def _paper_ranking(chunks: list[Ranked], papers: dict) -> dict[str, tuple[int, float]]:
    """Chunk results -> {paper_id: (rank of its best chunk, that chunk's score)}, for `papers` only."""
    ranking: dict[str, tuple[int, float]] = {}
    for pid, score in chunks:
        if pid not in ranking and pid in papers:
            ranking[pid] = (len(ranking) + 1, score)
    return ranking


class Retriever:
    def __init__(self, index: SearchIndex, settings: Settings, exclude: Collection[str] = ()):
        """`exclude`: paper ids to act as if absent (leave-one-out calibration in rag.evaluation.runs)."""
        self.index = index
        self.settings = settings
        self.papers = {p.paper_id: p for p in index.corpus.papers if p.paper_id not in exclude}
        self._order = {pid: position for position, pid in enumerate(self.papers)}
        absent = [index.corpus.by_id[pid] for pid in exclude if pid in index.corpus.by_id]
        lexicon = index.lexicon.without(absent) if absent else index.lexicon
        self.vocabulary = Vocabulary(lexicon, self.papers)
        self.names = NameFinder(self.papers.values())
        self.scope: frozenset[str] | None = None  # the only papers searched, when `within` chose some

    def within(self, paper_ids: Collection[str] | None, authors: Collection[str] | None = None) -> Retriever:
        """This retriever restricted to `paper_ids` and to the papers by any of `authors` (None:
        no restriction; both: papers in both): only those papers are ranked, named, looked up and
        so cited, each store filtering its dense and BM25 searches by paper id; the word counts
        behind the evidence stay the whole corpus's. PaperNotFoundError names every id the index
        lacks, or the authors no paper has."""
        if paper_ids is None and authors is None:
            return self
        wanted = list(self.papers)
        if paper_ids is not None:
            wanted = list(dict.fromkeys(paper_ids))
            if not wanted:
                raise ScopeError("paper_ids must name at least one paper; leave it out to search every paper")
            if len(wanted) > MAX_SCOPE_PAPERS:
                raise ScopeError(f"paper_ids may name at most {MAX_SCOPE_PAPERS} papers")
            unknown = [pid for pid in wanted if pid not in self.papers]
            if unknown:
                raise PaperNotFoundError(f"no paper with id {', '.join(map(repr, unknown))}")
        if authors is not None:
            wanted = [pid for pid in wanted if by_any(self.papers[pid], authors)]
            if not wanted:
                known = any(p.authors for p in self.papers.values())
                raise PaperNotFoundError(
                    f"no paper by {' or '.join(map(repr, authors))}"
                    + ("" if known else ": this corpus records no authors")
                )
        scoped = copy.copy(self)  # shares the vocabulary and the name finder: nothing is rebuilt per question
        scoped.papers = {pid: self.papers[pid] for pid in sorted(wanted, key=self._order.__getitem__)}
        scoped.scope = frozenset(scoped.papers)
        return scoped

    def named(self, text: str) -> list[Paper]:
        """The papers whose name `text` mentions, in corpus order (one scan of `text`, at any corpus size)."""
        found = [pid for pid in self.names.named(text) if pid in self.papers]
        return [self.papers[pid] for pid in sorted(found, key=self._order.__getitem__)]

    def search(self, query: str, k: int | None = None, include: Collection[str] = ()) -> Retrieval:
        """`find` for a query given as text (a search, not a question: nothing is set aside)."""
        query = " ".join((query or "").split())
        if not query:
            raise QueryError("the query is empty")
        return self.find(read_query(query), k, include)

    def find(self, reading: Reading, k: int | None = None, include: Collection[str] = ()) -> Retrieval:
        """The k best papers for a query as the analysis read it, and after them the papers of
        `include` (ids the question analysis tied to the question: named, or holding its term)
        that did not make the k."""
        query = reading.text
        if not query:
            raise QueryError("the query is empty")
        k = self.settings.retrieval.k if k is None else k
        if not 1 <= k <= MAX_K:
            raise QueryError(f"k must be between 1 and {MAX_K}")

        mode = self.settings.retrieval.retrieval_mode
        multilingual_embedder = self.index.multilingual_embedder if mode == "hybrid" and reading.foreign else None
        multilingual = multilingual_embedder is not None
        candidates = self.settings.retrieval.candidates
        dense: dict[str, tuple[int, float]] = {}
        if multilingual_embedder is not None:
            embedding = multilingual_embedder.get_query_embedding(query)
            dense = _paper_ranking(self.index.dense_ranking(embedding, candidates, True, self.scope), self.papers)
            rankings = [(self.settings.retrieval.dense_weight, dense)]
        else:
            embedding = self.index.embedder.get_query_embedding(query)
            rankings = []
            if mode != "bm25":
                dense = _paper_ranking(self.index.dense_ranking(embedding, candidates, False, self.scope), self.papers)
                rankings.append((self.settings.retrieval.dense_weight, dense))
            if mode != "dense":
                bm25 = _paper_ranking(self.index.bm25_ranking(query, candidates, self.scope), self.papers)
                weight = self.settings.retrieval.bm25_weight
                if mode == "hybrid" and bm25:
                    # BM25 counts as much as its best paper matches the question: on a paraphrase
                    # that shares only common words with the abstract its ranking is noise, and it
                    # would push down what the dense ranking found.
                    weight *= self.vocabulary.coverage(reading.stems, min(bm25, key=lambda pid: bm25[pid][0]))
                rankings.append((weight, bm25))

        # A paper the query names ("What is ImpQuant?") ranks first in one more list.
        rankings.append((1.0, {paper.paper_id: (1, 1.0) for paper in self.named(query)}))

        fused: dict[str, float] = {}
        for weight, ranking in rankings:
            for pid, (rank, _) in ranking.items():
                fused[pid] = fused.get(pid, 0.0) + weight / (self.settings.retrieval.rrf_k + rank)
        ordered = sorted(fused, key=lambda pid: (-fused[pid], dense.get(pid, (10**9,))[0]))[:k]
        ordered += [pid for pid in dict.fromkeys(include) if pid in self.papers and pid not in ordered]

        question = np.asarray(embedding, dtype=np.float32)
        sentences = self.index.sentences_of(ordered)
        hits = []
        for rank, pid in enumerate(ordered, start=1):
            scores = _cosines(sentences[pid], question, multilingual)
            hits.append(
                Hit(
                    paper=self.papers[pid],
                    rank=rank,
                    score=fused.get(pid, 0.0),
                    # A paper only BM25 found: its best sentence cosine stands in.
                    dense_score=dense[pid][1] if pid in dense else float(scores.max(initial=0.0)),
                    snippet=sentences[pid].texts[int(np.argmax(scores))] if len(scores) else "",
                    sentence_scores=dict(zip(sentences[pid].texts, map(float, scores), strict=False)),
                    sentences=sentences[pid],
                )
            )
        return Retrieval(query=query, multilingual=multilingual, hits=hits, vector=question)

    def containing(
        self, phrases: Sequence[str], contribution: bool, limit: int, alternatives: Sequence[Sequence[str]] = ()
    ) -> list[str]:
        """The papers that contain every phrase (or an alias of it), each within one sentence
        ("Which papers report results on LongBench?"), where of the phrases in one of
        `alternatives` ("spiking or binary neural networks") any one will do; with `contribution`,
        a phrase only counts in a sentence that states the paper's contribution ("Which papers
        propose new benchmarks?"). Candidates come from BM25's inverted index, so the cost follows
        the phrases' postings, not the corpus. Empty when more than `limit` papers qualify: a term
        that common does not pick papers."""
        grouped = {phrase for group in alternatives for phrase in group}
        needs = [list(group) for group in alternatives] + [[p] for p in phrases if p not in grouped]
        # Each phrase, or the other form of an alias the corpus defines ("VLMs" and "vision-language
        # models"), or a version of the model family it names ("Qwen" and "Qwen2.5").
        vocabulary = self.vocabulary
        forms = [
            [form for p in need for form in (p, *vocabulary.other_forms(p), *vocabulary.versions(p))] for need in needs
        ]
        wanted = [[s for s in map(stems, options) if s] for options in forms]
        wanted = [w for w in wanted if w]
        if not wanted:
            return []
        terms = " ".join(form for options in forms for form in options)
        candidates = _paper_ranking(
            self.index.bm25_ranking(terms, self.settings.retrieval.term_candidates, self.scope), self.papers
        )
        rows = self.index.sentences_of(candidates)
        found = []
        for pid in candidates:
            sentences = [stems(text) for text in rows[pid].texts if not contribution or NEW_WORK.search(text)]
            if all(any(w <= own for w in options for own in sentences) for options in wanted):
                found.append(pid)
        return found if len(found) <= limit else []

    def rescored(self, hit: Hit, retrieval: Retrieval) -> Hit:
        """`hit` with its sentences scored against another retrieval's query: a follow-up's paper
        is found with the conversation, its answering sentences with the question itself."""
        scores = _cosines(hit.sentences, retrieval.vector, retrieval.multilingual)
        return replace(hit, sentence_scores=dict(zip(hit.sentences.texts, map(float, scores), strict=False)))

    def sentence_fit(self, retrieval: Retrieval, paper_ids: list[str]) -> float:
        """The best cosine between the retrieval's query and a sentence of the given papers, retrieved or not."""
        known = self.index.sentences_of([pid for pid in paper_ids if pid in self.papers])
        # A paper not retrievable here, or with no sentence, counts 0.0 (a best cosine may be lower).
        return max(
            (
                float(_cosines(known[pid], retrieval.vector, retrieval.multilingual).max())
                if pid in known and known[pid].texts
                else 0.0
                for pid in paper_ids
            ),
            default=0.0,
        )


def _cosines(rows: SentenceRows, vector: np.ndarray, multilingual: bool) -> np.ndarray:
    """Cosines of a paper's sentences with a query vector (of the model that made it)."""
    vectors = rows.multilingual if multilingual else rows.vectors
    return vectors @ vector if len(rows.texts) else np.zeros(0)
