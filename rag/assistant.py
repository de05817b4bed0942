"""The one entry point for answers: condense -> retrieve -> abstain? -> generate -> cite.

`Assistant.ask(question, history)` returns an `Answer`; `Assistant.stream(...)` yields the
answer's text pieces as they are produced (markers already checked and renumbered), then the
final `Answer`.
"""

from __future__ import annotations

import re
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass, field

import numpy as np

from . import prompts
from .citations import Citation, CitationTracker, content_words, lexical_support
from .config import Settings
from .corpus import mentions
from .embedding import is_cjk
from .errors import GeneratorError, QueryError
from .generation import ExtractiveGenerator, Generator, LLMGenerator, make_generator
from .index import LoadedIndex
from .retrieval import Hit, Retrieval, Retriever

# Names of things: nuScenes, AlphaFold, QM9, GPT-4, SWE-bench (not plain capitalised words).
_ENTITY = re.compile(r"(?<![\w-])(?:[A-Za-z]*[a-z][A-Z][\w-]*|[A-Za-z]+\d[\w-]*|[A-Z]{2,}[\w-]*)(?![\w-])")
_TOKEN = re.compile(r"[\w-]+")
_FOLLOW_UP = re.compile(
    r"\b(it|its|this|that|these|those|they|them|their|the (paper|method|model|approach|authors|framework|work))\b"
    r"|^(and|also|what about|how about)\b|它|这个|该|这篇|他们|其",
    re.I,
)


def _not_covered(text: str) -> bool:
    return any(p in text.lower() for p in prompts.NOT_COVERED_PATTERNS)


@dataclass
class Answer:
    text: str
    citations: list[Citation]
    abstained: bool
    query: str  # the standalone query that was searched
    generator: str
    fallback: bool = False  # the LLM failed and the extractive answer stands in
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds per stage

    def to_dict(self) -> dict:
        return {
            "answer": self.text,
            "citations": [c.to_dict() for c in self.citations],
            "abstained": self.abstained,
            "query": self.query,
            "generator": self.generator,
            "fallback": self.fallback,
            "timings": {k: round(v, 1) for k, v in self.timings.items()},
        }


class Assistant:
    def __init__(self, index: LoadedIndex, settings: Settings, generator: Generator | None = None,
                 exclude: Collection[str] = ()):
        """`exclude`: paper ids to act as if absent (leave-one-out calibration)."""
        self.index = index
        self.settings = settings
        self.retriever = Retriever(index, settings, exclude)
        texts = [s.text for s in index.sentences]
        self.generator = generator or make_generator(settings, texts)
        self.extractive = self.generator if isinstance(self.generator, ExtractiveGenerator) else ExtractiveGenerator(texts)
        # Every word of the abstracts, with hyphen parts and plural-less forms ("PDEs" -> "PDE").
        tokens = {t for p in self.retriever.papers.values() for t in _TOKEN.findall(p.text)}
        parts = {part for t in tokens for part in t.split("-")}
        self.vocabulary = tokens | parts | {w[:-1] for w in tokens | parts if w.endswith("s")}

    # -- follow-ups ---------------------------------------------------------------------------

    def condense(self, question: str, history: list[dict]) -> str:
        """A standalone query for a follow-up: the LLM's rewrite when there is one, else a rule
        that carries the previous question and the papers named in the previous answer."""
        users = [t["content"] for t in history if t.get("role") == "user" and t.get("content")]
        if not users:
            return question
        if isinstance(self.generator, LLMGenerator):
            try:
                rewritten = self.generator.condense(question, history)
                if 0 < len(rewritten) <= 500:
                    return rewritten
            except GeneratorError:
                pass
        if not _FOLLOW_UP.search(question) and len(content_words(question)) > 3:
            return question
        last_answer = next((t["content"] for t in reversed(history) if t.get("role") == "assistant"), "")
        named = [p.name for p in self.index.corpus.papers if mentions(last_answer, p.name)]
        return " ".join([question, users[-1], *named[:3]])

    # -- abstention ---------------------------------------------------------------------------

    def weak(self, retrieval: Retrieval) -> bool:
        """Retrieval too weak to answer from: calibrated on questions absent from the corpus."""
        if not retrieval.hits:
            return True
        if retrieval.multilingual:
            return retrieval.top_dense < self.settings.abstain_below_multilingual
        if any(mentions(retrieval.query, h.paper.name) for h in retrieval.hits):
            return False  # the question names a paper of the corpus
        if retrieval.top_dense < self.settings.abstain_unknown_below and self.unknown_entities(retrieval.query):
            return True  # it names a model, dataset or benchmark no abstract mentions
        if retrieval.top_dense >= self.settings.abstain_below:
            return False
        words = content_words(retrieval.query)
        covered = content_words(retrieval.hits[0].paper.text)
        return not words or len(words & covered) / len(words) < 0.75

    def unknown_entities(self, query: str) -> list[str]:
        """Entity-like tokens of the query that occur in no abstract ("LLM-generated" counts as
        known when "LLM" is)."""
        unknown = []
        for token in _ENTITY.findall(query):
            base = re.sub(r"-[a-z]+$", "", token)
            if token not in self.vocabulary and base not in self.vocabulary:
                unknown.append(token)
        return unknown

    def abstention(self, hits: list[Hit]) -> str:
        closest_names = [h.paper.name for h in hits[:3] if not h.paper.name.endswith("…")]
        closest = prompts.ABSTAIN_CLOSEST.format(names=", ".join(closest_names)) if closest_names else ""
        return prompts.ABSTAIN + closest

    # -- citations ----------------------------------------------------------------------------

    def support(self, sentence: str, hit: Hit) -> tuple[float, str]:
        """How well the paper supports an answer sentence, and the paper sentence that does."""
        if sentence in hit.sentence_scores:
            return 1.0, sentence
        best_lexical = max(hit.sentence_scores, key=lambda s: lexical_support(sentence, s), default="")
        lexical = lexical_support(sentence, hit.paper.text)
        if lexical >= self.settings.support_threshold and not is_cjk(sentence):
            return lexical, best_lexical
        rows = self.retriever.sentence_rows.get(hit.paper.paper_id, [])
        if not rows:
            return lexical, best_lexical
        if is_cjk(sentence) and self.index.multilingual_embedder is not None:
            vector = self.index.multilingual_embedder.get_query_embedding(sentence)
            matrix = self.index.multilingual_sentence_vectors
            threshold_shift = self.settings.abstain_below_multilingual - self.settings.support_threshold
        else:
            vector = self.index.embedder.get_query_embedding(sentence)
            matrix = self.index.sentence_vectors
            threshold_shift = 0.0
        scores = matrix[rows] @ np.asarray(vector, dtype=np.float32)
        best = int(np.argmax(scores))
        return max(lexical, float(scores[best]) - threshold_shift), self.index.sentences[rows[best]].text

    # -- answers ------------------------------------------------------------------------------

    def stream(self, question: str, history: list[dict] | None = None, k: int | None = None) -> Iterator[str | Answer]:
        """Yield text pieces, then the final Answer."""
        question = " ".join((question or "").split())
        if not question:
            raise QueryError("the question is empty")
        timings: dict[str, float] = {}
        started = time.perf_counter()

        query = self.condense(question, history or [])
        timings["condense"] = (time.perf_counter() - started) * 1000
        mark = time.perf_counter()
        retrieval = self.retriever.search(query, k or self.settings.k)
        timings["retrieve"] = (time.perf_counter() - mark) * 1000
        sources = retrieval.hits[: self.settings.answer_sources]

        mark = time.perf_counter()
        if self.weak(retrieval):
            text = self.abstention(retrieval.hits)
            yield text
            timings["generate"] = (time.perf_counter() - mark) * 1000
            timings["total"] = (time.perf_counter() - started) * 1000
            yield Answer(text, [], True, query, self.generator.name, timings=timings)
            return

        generator, fallback = self.generator, False
        tracker = CitationTracker(sources, self.support, self.settings.support_threshold)
        pieces: list[str] = []
        try:
            for piece in generator.stream(query, sources):
                shown = tracker.feed(piece)
                if shown:
                    pieces.append(shown)
                    yield shown
            shown = tracker.finish()
            if shown:
                pieces.append(shown)
                yield shown
            text = "".join(pieces)
            if generator is not self.extractive and not tracker.citations and not _not_covered(text):
                raise GeneratorError("the language model's answer cited none of the sources")
        except GeneratorError:
            if not self.settings.llm_fallback or (pieces and generator is self.extractive):
                raise
            # The extractive answer replaces whatever was shown; the final Answer is authoritative.
            generator, fallback = self.extractive, True
            tracker = CitationTracker(sources, self.support, self.settings.support_threshold)
            pieces = [tracker.feed(p) for p in self.extractive.stream(query, sources)]
            pieces.append(tracker.finish())
        text = "".join(pieces).strip()
        abstained = not tracker.citations and (not text or _not_covered(text))
        if abstained:
            text = self.abstention(retrieval.hits)
        elif fallback:
            text = f"{text} {prompts.FALLBACK_NOTE}"
        timings["generate"] = (time.perf_counter() - mark) * 1000
        timings["total"] = (time.perf_counter() - started) * 1000
        yield Answer(text, tracker.citations, abstained, query, generator.name, fallback, timings)

    def ask(self, question: str, history: list[dict] | None = None, k: int | None = None) -> Answer:
        *_, answer = self.stream(question, history, k)
        return answer
