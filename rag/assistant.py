"""The one entry point for answers: condense -> analyse -> retrieve -> abstain? -> generate -> cite.

`Assistant.ask(question, history)` returns an `Answer`; `Assistant.stream(...)` yields the
answer's text pieces as they are produced (markers already checked and renumbered), then the
final `Answer`.
"""

from __future__ import annotations

import copy
import re
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from rag.answer import prompts
from rag.answer.citations import Citation, CitationTracker, lexical_support
from rag.answer.extractive import ExtractiveGenerator
from rag.answer.generator import Generator, make_generator
from rag.answer.suggestions import next_questions
from rag.common.errors import GeneratorError, QueryError
from rag.common.settings import EvidenceWeights, Settings
from rag.common.text import NEW_WORK_VERBS, asks_for_several, content_words, is_cjk, stems
from rag.index.corpus import mentions
from rag.index.stores.base import SearchIndex
from rag.judge.constraints import ConstraintCheck, either, heaviest_unfound, support
from rag.judge.constraints import check as check_constraints
from rag.judge.evidence import Evidence, EvidenceModel, Missing
from rag.query.analysis import Ask, analyse, framing_words, intent_of, without_exclusions
from rag.query.words import name_like, question_phrases
from rag.retrieve.retrieval import Hit, Retrieval, Retriever

# A question asking for papers that contribute something ("Which papers propose new benchmarks?"):
# a paper holds its term only in a sentence saying what it contributes.
_ASKS_FOR_NEW = re.compile(rf"\b({NEW_WORK_VERBS})\w*\b", re.I)
_FOLLOW_UP = re.compile(
    r"\b(it|its|this|that|these|those|they|them|their|the (paper|method|model|approach|authors|framework|work))\b"
    r"|^(and|also|what about|how about)\b|它|这个|该|这篇|他们|其",
    re.I,
)
# A pronoun in a comparison that names one paper ("How does its approach differ from
# dLLM-Cache's?") stands for the other: the paper of the conversation.
_PRONOUN = re.compile(r"\b(it|its|itself|they|them|their|this|these)\b|它|其", re.I)


def _not_covered(text: str) -> bool:
    return any(p in text.lower() for p in prompts.NOT_COVERED_PATTERNS)


Confidence = Literal["high", "low", "none"]


@dataclass
class Answer:
    text: str
    citations: list[Citation]
    abstained: bool
    query: str  # the standalone query that was searched
    generator: str
    fallback: bool = False  # the LLM failed and the extractive answer stands in
    timings: dict[str, float] = field(default_factory=dict)  # milliseconds per stage
    # high: the cited papers support what the question asks; low: they are the closest, but
    # `missing` (a phrase of the question) is in none of them; none: abstained.
    confidence: Confidence = "high"
    missing: str | None = None
    note: str = ""  # the opening sentence that says what is missing (a low answer's), part of `text`
    # How much of the question the cited papers hold (1 - the weight of its constraints not
    # found; 0 when a name is not found or no paper is likely enough): high above 1 - missing_below.
    support: float = 1.0
    question: str = ""  # what was asked, and the conversation before it (kept with a rating)
    history: list[dict] = field(default_factory=list)
    answer_id: str = field(default_factory=lambda: uuid.uuid4().hex)  # names it for POST /feedback
    ask: Ask | None = None  # what the question asks (rag/query/analysis.py)

    @property
    def body(self) -> str:
        """The answer without its note: what the sources say."""
        return self.text[len(self.note) :].strip() if self.note and self.text.startswith(self.note) else self.text

    def to_dict(self) -> dict:
        return {
            "answer_id": self.answer_id,
            "answer": self.text,
            "citations": [c.to_dict() for c in self.citations],
            "abstained": self.abstained,
            "confidence": self.confidence,
            "missing": self.missing,
            "query": self.query,
            "generator": self.generator,
            "fallback": self.fallback,
            "timings": {k: round(v, 1) for k, v in self.timings.items()},
            "suggestions": self.suggestions,
            "ask": self.ask.to_dict() if self.ask else None,
        }

    @property
    def suggestions(self) -> list[str]:
        """Questions to ask next about the cited papers."""
        asked = [self.question, *(t["content"] for t in self.history if t.get("role") == "user")]
        return next_questions([c.name for c in self.citations], asked)


@dataclass(frozen=True)
class Verdict:
    """What the retrieved papers can answer of a question (`Assistant.judge`)."""

    hits: list[Hit]  # the papers that answer; empty: abstain
    confidence: Confidence
    missing: Missing | None  # the constraint a low answer names
    support: float  # `Answer.support`
    best: float  # the best paper's probability of answering
    checks: tuple[ConstraintCheck, ...] = ()  # the question's constraints in the papers (none: not checked)


class Assistant:
    def __init__(
        self,
        index: SearchIndex,
        settings: Settings,
        generator: Generator | None = None,
        exclude: Collection[str] = (),
        observer: Callable[[Answer], None] | None = None,
    ):
        """`exclude`: paper ids to act as if absent (leave-one-out calibration); `observer`: called
        with every final Answer (the service counts outcomes for /metrics)."""
        self.index = index
        self.settings = settings
        self.observer = observer
        self.retriever = Retriever(index, settings, exclude)
        self.generator = generator or make_generator(settings, index.lexicon)
        self.extractive = (
            self.generator
            if isinstance(self.generator, ExtractiveGenerator)
            else ExtractiveGenerator(index.lexicon, settings.extractive)
        )
        self.evidence = EvidenceModel(self.retriever.vocabulary, settings.evidence)

    def within(self, paper_ids: Collection[str] | None) -> Assistant:
        """This assistant answering from `paper_ids` only (None: every paper, itself): retrieval is
        restricted to them (`Retriever.within`), so nothing else is searched or cited; evidence,
        abstention and confidence follow the same rules. PaperNotFoundError names unknown ids."""
        if paper_ids is None:
            return self
        scoped = copy.copy(self)
        scoped.retriever = self.retriever.within(paper_ids)
        return scoped

    # -- follow-ups ---------------------------------------------------------------------------

    def condense(self, question: str, history: list[dict], k: int | None = None) -> tuple[str, Retrieval | None]:
        """The standalone query to search, and the retrieval of the question alone (None with no history).

        In a conversation a question stands alone when it names a paper or something the
        conversation never mentioned (a name-like word: AgentNoiseBench, RAI), or when its own best
        sentence fits it clearly better than the papers the last answer named do: it has a topic
        of its own, whatever pronouns it uses ("这篇关于医学音频的论文…", "What is X?"). With no
        named paper to compare with, a question that points back ("it", "this method", 这篇,
        "what about") or is too short to name a topic is a follow-up. Only a follow-up is
        rewritten with the earlier turns: by the LLM when there is one, else with the previous
        question and the papers named in the previous answer."""
        users = [t["content"] for t in history if t.get("role") == "user" and t.get("content")]
        if not users:
            return question, None
        alone = self.retriever.search(question, k or self.settings.k)
        last_answer = next((t["content"] for t in reversed(history) if t.get("role") == "assistant"), "")
        discussed = self.retriever.named(last_answer)
        if self.stands_alone(question, alone, discussed, " ".join(t.get("content") or "" for t in history)):
            return question, alone
        rewrite = getattr(self.generator, "condense", None)  # a generator that can rewrite follow-ups (an LLM)
        if rewrite is not None:
            try:
                rewritten = rewrite(question, history)
                if 0 < len(rewritten) <= 500:
                    return rewritten, alone
            except GeneratorError:
                pass
        return " ".join([question, users[-1], *(p.name for p in discussed[:3])]), alone

    def stands_alone(self, question: str, alone: Retrieval, discussed: list, conversation: str) -> bool:
        named = self.retriever.named(question)
        if named:
            compares_one = len(named) == 1 and intent_of(question, asks_for_several(question)) == "comparison"
            earlier = {p.paper_id for p in self.retriever.named(conversation)} - {named[0].paper_id}
            return not (compares_one and earlier and _PRONOUN.search(question))
        # A name the conversation never used ("What is AgentNoiseBench?" after talk of RoPE) is a
        # topic of the question's own, known to the corpus or not.
        context = " ".join([conversation, *(p.text for p in discussed)]).lower()
        if any(word.lower() not in context for word in name_like(question)):
            return True
        if discussed:
            own = max(alone.hits[0].sentence_scores.values(), default=0.0) if alone.hits else 0.0
            fit = self.retriever.sentence_fit(alone, [p.paper_id for p in discussed])
            return own - fit >= self.weights(alone).standalone_margin
        points_back = bool(_FOLLOW_UP.search(question)) or (not is_cjk(question) and len(content_words(question)) <= 3)
        return not points_back

    def analyse(self, question: str, query: str) -> Ask:
        """What the question asks, and the papers tied to it whatever the scores: those it names
        (for a follow-up, those its standalone query names), and for "Which papers ... TERM?"
        every paper holding the term (English: the term is matched by its words)."""
        named = self.retriever.named(question)
        scope = self.retriever.scope
        if scope and not named and len(scope) <= self.settings.answer_sources and _FOLLOW_UP.search(question):
            # Asked within a few chosen papers ("Ask about this paper"), "it" or "they" are those.
            named = list(self.retriever.papers.values())
        # A follow-up's subject is the paper of the conversation ("How does its approach differ from X's?").
        borrowed = self.retriever.named(query) if query != question else []
        ask = analyse(question, list({p.paper_id: p for p in [*named, *borrowed]}.values()))
        holding: list[str] = []
        contribution = bool(_ASKS_FOR_NEW.search(question))
        if (ask.several or ask.intent in ("list", "summary")) and not is_cjk(question) and ask.constraints:
            holding = self.retriever.containing(
                ask.constraints, contribution, self.settings.term_papers_at_most, ask.alternatives
            )
        # Not the papers a follow-up borrows, which must still answer it; but a comparison sets
        # every paper it names, its own and the conversation's, side by side.
        subjects = ask.named if ask.intent == "comparison" else named
        tied = dict.fromkeys([*(p.paper_id for p in subjects), *holding])
        # A paper without the term cannot qualify when the term is a name ("LongBench", "Qwen") or
        # what the papers must contribute ("propose new benchmarks"); a topic in plain words
        # ("diffusion policies") is matched by meaning too.
        exclusive = bool(holding) and (contribution or all(name_like(f"x {c}") == c.split() for c in ask.constraints))
        return replace(ask, tied=tuple(tied), only=tuple(tied) if exclusive else ())

    def retrieve(
        self, query: str, alone: Retrieval | None, k: int | None = None, include: Collection[str] = ()
    ) -> Retrieval:
        """The retrieval for the query `condense` chose (the question's own when it stood alone),
        holding every paper of `include`."""
        if alone is not None and alone.query == query and set(include) <= {h.paper.paper_id for h in alone.hits}:
            return alone
        return self.retriever.search(query, k or self.settings.k, include)

    # -- evidence -----------------------------------------------------------------------------

    def assess(self, retrieval: Retrieval, asked: str, ask: Ask | None = None) -> list[Evidence]:
        """Evidence for the papers an answer may use (the first `answer_sources` hits, and those
        the question's analysis `ask` ties to it); `asked`: the user's own question, whose named
        papers count as named (not those a follow-up borrowed)."""
        tied = ask.tied if ask else ()
        hits = self.candidates(retrieval, tied, bool(ask and ask.listing))
        alternatives = ask.alternatives if ask else ()
        return self.evidence.assess(retrieval.query, hits, retrieval.multilingual, asked, tied, alternatives)

    def candidates(self, retrieval: Retrieval, tied: Collection[str], listing: bool = False) -> list[Hit]:
        first = self.settings.list_sources if listing else self.settings.answer_sources
        return retrieval.hits[:first] + [h for h in retrieval.hits[first:] if h.paper.paper_id in tied]

    def weights(self, retrieval: Retrieval) -> EvidenceWeights:
        return self.evidence.weights(retrieval.multilingual)

    def sources(self, retrieval: Retrieval, asked: str) -> list[Hit]:
        """The papers that answer: likely enough, and close to the best one. Empty: abstain."""
        return self.judge(retrieval, asked).hits

    def judge(self, retrieval: Retrieval, asked: str, ask: Ask | None = None) -> Verdict:
        """The papers that answer, how confidently, and the part of `asked` none of them contains.

        From the best paper's calibrated probability and the question's constraints found in the
        papers (rag/judge/constraints.py): none below `answer_above` (abstain); high when every
        constraint is found, or at `high_above` or more when those not found weigh less than
        `missing_below` of the question and none is another thing (a name, a modifier:
        `ConstraintCheck.other`); low otherwise, naming the weightiest constraint not found. Questions in other
        scripts, whose words are not matched, are high at `high_above`. `ask`: the question's
        analysis; the papers it ties to the question are taken as answering."""
        tied = ask.tied if ask else ()
        listing = bool(ask and ask.listing)
        evidence = self.assess(retrieval, asked, ask)
        several = asks_for_several(retrieval.query) or bool(ask and ask.intent in ("list", "summary"))
        hits = self._sources(self.candidates(retrieval, tied, listing), evidence, retrieval, several)
        if ask and ask.only:
            hits = [hit for hit in hits if hit.paper.paper_id in ask.only]
        if not hits:
            return Verdict([], "none", None, 0.0, max((e.probability for e in evidence), default=0.0))
        w = self.weights(retrieval)
        best = max(e.probability for e in evidence)
        if retrieval.multilingual:
            return Verdict(hits, *(("high", None, 1.0) if best >= w.high_above else ("low", None, 0.0)), best)
        checks = tuple(either(self.check_constraints(asked, hits, ask), ask.alternatives if ask else (), w.soft_above))
        held = support(best, checks, w.high_above, w.soft_above)
        unfound = heaviest_unfound(checks, w.soft_above)
        if unfound is None or held > 1.0 - w.missing_below:
            return Verdict(hits, "high", None, held, best, checks)
        return Verdict(hits, "low", Missing(unfound.named, unfound.weight), held, best, checks)

    def check_constraints(self, asked: str, hits: list[Hit], ask: Ask | None) -> list[ConstraintCheck]:
        """Each constraint of the question against the answering papers (rag/judge/constraints.py)."""
        index = self.retriever.index

        def embed(phrases: list[str]) -> np.ndarray:
            rows = np.asarray(index.embedder.get_text_embedding_batch(phrases), dtype=np.float32)
            return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

        constraints = ask.constraints if ask else (" ".join(run) for run in question_phrases(asked))
        # A question about named papers asks it of them, not of a neighbour that holds the words.
        named = {p.paper_id for p in ask.named} if ask else set()
        hits = [hit for hit in hits if hit.paper.paper_id in named] or hits
        vectors = [hit.sentences.vectors for hit in hits if len(hit.sentences.texts)]
        return check_constraints(
            list(constraints),
            asked,
            [hit.paper.paper_id for hit in hits],
            self.retriever.vocabulary,
            np.vstack(vectors) if vectors else np.zeros((0, 1), dtype=np.float32),
            embed,
            self.naming(hits, asked),
            [text for hit in hits for text in hit.sentences.texts],
            self.settings.modifier_term_uses,
            lambda: framing_words(asked, self.settings.tagger_model),
        )

    @staticmethod
    def naming(hits: list[Hit], asked: str) -> set[str]:
        """The stems of the paper names the question uses: they pick the paper, not what is asked of it."""
        return {stem for hit in hits if mentions(asked, hit.paper.name) for stem in stems(hit.paper.name)}

    def _sources(self, hits: list[Hit], evidence: list[Evidence], retrieval: Retrieval, several: bool) -> list[Hit]:
        best = max((e.probability for e in evidence), default=0.0)
        if best < self.weights(retrieval).answer_above:
            return []
        if several and not retrieval.multilingual:
            rules = self.settings.evidence.several
            belongs = self.evidence.belongs(evidence)
            # A question that asks for papers expects more than one: the likeliest members join up
            # to `at_least`, each only if it could answer on its own (answer_above).
            likeliest = sorted(range(len(evidence)), key=lambda i: -belongs[i])[: rules.at_least]
            floor = self.weights(retrieval).answer_above
            return [
                hit
                for i, (hit, e, p) in enumerate(zip(hits, evidence, belongs, strict=False))
                if p >= rules.cite_above or e.probability == best or (i in likeliest and e.probability >= floor)
            ]
        share = self.settings.evidence.several_cite_share if several else self.weights(retrieval).cite_share
        return [hit for hit, e in zip(hits, evidence, strict=False) if e.probability >= share * best]

    def abstention(self, hits: list[Hit], ask: Ask | None = None) -> str:
        closest_names = [h.paper.name for h in hits[:3] if not h.paper.name.endswith("…")]
        closest = prompts.ABSTAIN_CLOSEST.format(names=", ".join(closest_names)) if closest_names else ""
        opening = prompts.NONE_EXISTS if ask is not None and ask.intent == "existence" else ""
        return opening + prompts.ABSTAIN + closest

    # -- citations ----------------------------------------------------------------------------

    def support(self, sentence: str, hit: Hit) -> tuple[float, str]:
        """How well the paper supports an answer sentence, and the paper sentence that does."""
        if sentence in hit.sentence_scores:
            return 1.0, sentence
        best_lexical = max(hit.sentence_scores, key=lambda s: lexical_support(sentence, s), default="")
        lexical = lexical_support(sentence, hit.paper.text)
        if lexical >= self.settings.support_threshold and not is_cjk(sentence):
            return lexical, best_lexical
        rows = hit.sentences
        if not rows.texts:
            return lexical, best_lexical
        if is_cjk(sentence) and self.index.multilingual_embedder is not None and rows.multilingual is not None:
            vector = self.index.multilingual_embedder.get_query_embedding(sentence)
            matrix = rows.multilingual
            threshold_shift = self.settings.multilingual_support_threshold - self.settings.support_threshold
        else:
            vector = self.index.embedder.get_query_embedding(sentence)
            matrix = rows.vectors
            threshold_shift = 0.0
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        best = int(np.argmax(scores))
        return max(lexical, float(scores[best]) - threshold_shift), rows.texts[best]

    # -- answers ------------------------------------------------------------------------------

    def stream(self, question: str, history: list[dict] | None = None, k: int | None = None) -> Iterator[str | Answer]:
        """Yield text pieces, then the final Answer."""
        question = " ".join((question or "").split())
        if not question:
            raise QueryError("the question is empty")
        timings: dict[str, float] = {}
        started = time.perf_counter()

        # Searched, analysed and checked without what it leaves out (an LLM reads it whole).
        asked = without_exclusions(question)
        query, alone = self.condense(asked, history or [], k)
        timings["condense"] = (time.perf_counter() - started) * 1000
        mark = time.perf_counter()
        ask = self.analyse(question, query)
        timings["analyse"] = (time.perf_counter() - mark) * 1000
        mark = time.perf_counter()
        if ask.listing:
            k = max(k or self.settings.k, self.settings.list_sources)
        retrieval = self.retrieve(query, alone, k, ask.tied)
        timings["retrieve"] = (time.perf_counter() - mark) * 1000

        mark = time.perf_counter()
        verdict = self.judge(retrieval, asked, ask)
        sources, confidence, missing = verdict.hits, verdict.confidence, verdict.missing
        extract_for = query  # what the extractive generator picks sentences for
        if alone is not None and retrieval is not alone:
            # A follow-up: its papers come from the conversation, its sentences from the question.
            sources = [self.retriever.rescored(hit, alone) for hit in sources]
            extract_for = asked
        if not sources:
            text = self.abstention(retrieval.hits, ask)
            timings["first_piece"] = (time.perf_counter() - started) * 1000
            yield text
            timings["generate"] = (time.perf_counter() - mark) * 1000
            timings["total"] = (time.perf_counter() - started) * 1000
            yield self._observed(
                Answer(
                    text,
                    [],
                    True,
                    query,
                    self.generator.name,
                    timings=timings,
                    confidence="none",
                    support=0.0,
                    question=question,
                    history=history or [],
                    ask=ask,
                )
            )
            return

        note = prompts.NOT_FOUND.format(phrase=missing.phrase) if missing else ""
        if ask.intent == "existence" and confidence == "high" and self.generator is self.extractive:
            note = prompts.EXISTS  # "Is there work on ...?" answered by what the work is
        # A list or a table starts on a line of its own.
        joint = "\n\n" if ask.listing else " "
        if note:
            timings["first_piece"] = (time.perf_counter() - started) * 1000
            yield note + joint
        generator, fallback = self.generator, False
        tracker = CitationTracker(sources, self.support, self.settings.support_threshold)
        pieces: list[str] = []
        try:
            for piece in generator.stream(
                extract_for if generator is self.extractive else question if query == asked else query, sources, ask
            ):
                shown = tracker.feed(piece)
                if shown:
                    timings.setdefault("first_piece", (time.perf_counter() - started) * 1000)
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
            pieces = [tracker.feed(p) for p in self.extractive.stream(extract_for, sources, ask)]
            pieces.append(tracker.finish())
        text = "".join(pieces).strip()
        abstained = not tracker.citations and (not text or _not_covered(text))
        if abstained:
            text, confidence, missing, note = self.abstention(retrieval.hits, ask), "none", None, ""
        elif fallback:
            text = f"{text} {prompts.FALLBACK_NOTE}"
        if note:
            text = f"{note}{joint}{text}"
        timings["generate"] = (time.perf_counter() - mark) * 1000
        timings["total"] = (time.perf_counter() - started) * 1000
        yield self._observed(
            Answer(
                text,
                tracker.citations,
                abstained,
                query,
                generator.name,
                fallback,
                timings,
                confidence,
                missing.phrase if missing else None,
                note,
                support=0.0 if abstained else verdict.support,
                question=question,
                history=history or [],
                ask=ask,
            )
        )

    def _observed(self, answer: Answer) -> Answer:
        if self.observer is not None:
            self.observer(answer)
        return answer

    def ask(self, question: str, history: list[dict] | None = None, k: int | None = None) -> Answer:
        *_, answer = self.stream(question, history, k)
        assert isinstance(answer, Answer)  # the stream ends with the Answer
        return answer
