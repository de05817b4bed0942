"""The one entry point for answers, in the order the code runs:
condense -> analyse -> retrieve -> judge -> generate, citations checked as the text streams.

`Assistant.ask(question, history)` returns an `Answer`; `Assistant.stream(...)` yields `Piece`s
of the answer's text as they are produced (markers already checked and renumbered), then `Done`
with the final `Answer`.
"""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from rag.answer import metadata, prompts
from rag.answer.citations import Citation, CitationTracker, lexical_support
from rag.answer.extractive import ExtractiveGenerator
from rag.answer.generator import Generator, make_generator
from rag.answer.suggestions import next_questions
from rag.common.errors import GeneratorError, QueryError
from rag.common.settings import Settings
from rag.common.text import is_cjk
from rag.index.stores.base import SearchIndex
from rag.judge.verdict import Confidence, Judge
from rag.query.analysis import Ask, analyse, read, without_framing
from rag.query.words import Reading, names_one
from rag.retrieve.retrieval import Hit, Retrieval, Retriever, by_any


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
    # high: the cited papers hold what the question asks; low: they are the closest, but
    # `missing` (a phrase of the question) is in none of them; none: abstained.
    confidence: Confidence = "high"
    missing: str | None = None
    note: str = ""  # the opening sentence that says what is missing (a low answer's), part of `text`
    # How much of the question the cited papers hold (1 - the weight of its constraints not
    # found; 0 when a name is not found or no paper is likely enough): high above 1 - missing_below.
    held: float = 1.0
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
class Piece:
    """A piece of the answer's text, as it is produced (its markers checked and renumbered)."""

    text: str


@dataclass(frozen=True)
class Done:
    """The end of an answer's stream: the final `Answer`, authoritative over the pieces shown
    (a fallback replaces them)."""

    answer: Answer


Event = Piece | Done


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
        # What stands in when the generator fails: itself when it answers verbatim.
        self.fallback: Generator = (
            self.generator
            if self.generator.verbatim
            else ExtractiveGenerator(index.lexicon, settings.answering.extractive)
        )
        self.judge = Judge(index, self.retriever.vocabulary, settings)
        self.authors_recorded = any(p.authors for p in index.corpus.papers)

    def within(self, paper_ids: Collection[str] | None, authors: Collection[str] | None = None) -> Assistant:
        """This assistant answering from `paper_ids` and the papers by `authors` only (None: every
        paper): retrieval is restricted to them (`Retriever.within`), so nothing else is searched
        or cited; evidence, abstention and confidence follow the same rules. PaperNotFoundError
        names unknown ids, or authors no paper has."""
        if paper_ids is None and authors is None:
            return self
        scoped = copy.copy(self)
        scoped.retriever = self.retriever.within(paper_ids, authors)
        return scoped

    # -- follow-ups ---------------------------------------------------------------------------

    def condense(self, said: Reading, history: list[dict], k: int | None = None) -> tuple[str, Retrieval | None]:
        """The standalone query to search, and the retrieval of the question alone (None with no
        history); `said`: the question as the analysis reads it (`rag.query.analysis.read`).

        In a conversation a question stands alone when it names a paper or something the
        conversation never mentioned (a name-like word: AgentNoiseBench, RAI), or when its own best
        sentence fits it clearly better than the papers the last answer named do: it has a topic
        of its own, whatever pronouns it uses ("这篇关于医学音频的论文…", "What is X?"). With no
        named paper to compare with, a question that points back ("it", "this method", 这篇,
        "what about") or is too short to name a topic is a follow-up. Only a follow-up is
        rewritten with the earlier turns: by the generator when it can (an LLM), else with the
        previous question and the papers named in the previous answer."""
        question = said.text
        users = [t["content"] for t in history if t.get("role") == "user" and t.get("content")]
        if not users:
            return question, None
        alone = self.retriever.find(said, k or self.settings.retrieval.k)
        last_answer = next((t["content"] for t in reversed(history) if t.get("role") == "assistant"), "")
        discussed = self.retriever.named(last_answer)
        if self.stands_alone(said, alone, discussed, " ".join(t.get("content") or "" for t in history)):
            return question, alone
        try:
            rewritten = self.generator.condense(question, history)
            if rewritten is not None and 0 < len(rewritten) <= 500:
                return rewritten, alone
        except GeneratorError:
            pass
        return " ".join([question, users[-1], *(p.name for p in discussed[:3])]), alone

    def stands_alone(self, said: Reading, alone: Retrieval, discussed: list, conversation: str) -> bool:
        named = self.retriever.named(said.text)
        if named:
            compares_one = len(named) == 1 and said.intent == "comparison"
            earlier = {p.paper_id for p in self.retriever.named(conversation)} - {named[0].paper_id}
            return not (compares_one and earlier and said.pronoun)
        # A name the conversation never used ("What is AgentNoiseBench?" after talk of RoPE) is a
        # topic of the question's own, known to the corpus or not.
        context = " ".join([conversation, *(p.text for p in discussed)]).lower()
        if any(word.lower() not in context for word in said.names):
            return True
        if discussed:
            own = max(alone.hits[0].sentence_scores.values(), default=0.0) if alone.hits else 0.0
            fit = self.retriever.sentence_fit(alone, [p.paper_id for p in discussed])
            return own - fit >= self.judge.weights(alone).standalone_margin
        points_back = said.points_back or (not said.foreign and len(said.content) <= 3)
        return not points_back

    def analyse(self, question: str, query: str, lists: bool = True) -> Ask:
        """What the question asks, and the papers tied to it whatever the scores: those it names
        (for a follow-up, those its standalone query names), and for "Which papers ... TERM?"
        every paper holding the term (English: the term is matched by its words). `lists`: whether
        the several model may read it as a request for every paper that qualifies."""
        named = self.retriever.named(question)
        said = read(question)
        scope = self.retriever.scope
        if scope and not named and len(scope) <= self.settings.answering.answer_sources and said.points_back:
            # Asked within a few chosen papers ("Ask about this paper"), "it" or "they" are those.
            named = list(self.retriever.papers.values())
        # A follow-up's subject is the paper of the conversation ("How does its approach differ from X's?").
        borrowed = self.retriever.named(query) if query != said.text else []
        # Read as a list by the model of the question, unless it picks out one thing ("which ... dataset").
        several = (
            lists
            and not said.foreign
            and not said.several
            and self.judge.several(said.text)
            and names_one(said.text, self.settings.judging.tagger_model) is None
        )
        ask = analyse(question, list({p.paper_id: p for p in [*named, *borrowed]}.values()), query, several)
        one_fact = len(ask.facts) <= 1
        if ask.intent == "other" and one_fact and not said.foreign and (intent := self.judge.intent(said.text)):
            # No rule reads what it asks ("the fix that keeps uncertainty alive, rough sketch?"); the model does.
            # Not for a question of several facts: each is answered as read alone (`Ask.parts`), and one
            # intent for the whole would re-weigh what fills in after them ("what complexity, and what
            # does laziness save?" read as how it works lost its figure).
            ask = replace(ask, intent=intent, rules_read=ask.intent)
        elif not one_fact and not said.foreign:
            # ...each part read alone instead ("what's the fix?" asks how it works).
            ask = replace(ask, part_intents=tuple(self.judge.intent(fact.text) for fact in ask.facts))
        holding: list[str] = []
        if (ask.several or ask.intent in ("list", "summary")) and not said.foreign and ask.constraints:
            holding = self.retriever.containing(
                ask.constraints, said.new_work, self.settings.retrieval.term_papers_at_most, ask.alternatives
            )
        # Not the papers a follow-up borrows, which must still answer it; but a comparison sets
        # every paper it names, its own and the conversation's, side by side.
        subjects = ask.named if ask.intent == "comparison" else named
        tied = dict.fromkeys([*(p.paper_id for p in subjects), *holding])
        # A paper without the term cannot qualify when the term is a name ("LongBench", "Qwen") or
        # what the papers must contribute ("propose new benchmarks"); a topic in plain words
        # ("diffusion policies") is matched by meaning too.
        exclusive = bool(holding) and (said.new_work or ask.names_only)
        ask = replace(ask, tied=tuple(tied), only=tuple(tied) if exclusive else ())
        if said.foreign:
            return ask
        framing = self.settings.judging.evidence.framing
        aside = self.judge.framed(said.text, framing.searched_below)
        return without_framing(ask, aside) if len(aside) >= framing.searched_at_least else ask

    def retrieve(self, ask: Ask, alone: Retrieval | None, k: int | None = None) -> Retrieval:
        """The retrieval for the query `condense` chose (the question's own when it stood alone),
        holding every paper the analysis tied to the question."""
        searched = ask.sought
        if (
            alone is not None
            and alone.query == searched.text
            and set(ask.tied) <= {h.paper.paper_id for h in alone.hits}
        ):
            return alone
        return self.retriever.find(searched, k or self.settings.retrieval.k, ask.tied)

    def sources_for(self, ask: Ask, k: int | None) -> int | None:
        """How many papers to retrieve: a list reads more (`list_sources`)."""
        return max(k or self.settings.retrieval.k, self.settings.answering.list_sources) if ask.listing else k

    def abstention(self, hits: list[Hit], ask: Ask | None = None) -> str:
        closest_names = [h.paper.display_name for h in hits[:3] if not h.paper.display_name.endswith("…")]
        closest = prompts.ABSTAIN_CLOSEST.format(names=", ".join(closest_names)) if closest_names else ""
        opening = prompts.NONE_EXISTS if ask is not None and ask.intent == "existence" else ""
        return opening + prompts.ABSTAIN + closest

    # -- citations ----------------------------------------------------------------------------

    def grounding(self, sentence: str, hit: Hit) -> tuple[float, str]:
        """How well the paper grounds an answer sentence, and the paper sentence that does."""
        if sentence in hit.sentence_scores:
            return 1.0, sentence
        best_lexical = max(hit.sentence_scores, key=lambda s: lexical_support(sentence, s), default="")
        lexical = lexical_support(sentence, hit.paper.text)
        if lexical >= self.settings.answering.support_threshold and not is_cjk(sentence):
            return lexical, best_lexical
        rows = hit.sentences
        if not rows.texts:
            return lexical, best_lexical
        if is_cjk(sentence) and self.index.multilingual_embedder is not None and rows.multilingual is not None:
            vector = self.index.multilingual_embedder.get_query_embedding(sentence)
            matrix = rows.multilingual
            threshold_shift = (
                self.settings.answering.multilingual_support_threshold - self.settings.answering.support_threshold
            )
        else:
            vector = self.index.embedder.get_query_embedding(sentence)
            matrix = rows.vectors
            threshold_shift = 0.0
        scores = matrix @ np.asarray(vector, dtype=np.float32)
        best = int(np.argmax(scores))
        return max(lexical, float(scores[best]) - threshold_shift), rows.texts[best]

    # -- answers ------------------------------------------------------------------------------

    def stream(self, question: str, history: list[dict] | None = None, k: int | None = None) -> Iterator[Event]:
        """The answer's pieces as they are produced, then `Done` with the final Answer."""
        question = " ".join((question or "").split())
        if not question:
            raise QueryError("the question is empty")
        history = history or []
        timings: dict[str, float] = {}
        started = mark = time.perf_counter()

        def lap(stage: str) -> None:
            nonlocal mark
            now = time.perf_counter()
            timings[stage] = (now - mark) * 1000
            mark = now

        # Searched, analysed and checked without what it leaves out (an LLM reads it whole).
        said = read(question)
        query, alone = self.condense(said, history, k)
        lap("condense")
        ask = self.analyse(question, query)
        lap("analyse")
        by = ask.authorship.by if ask.authorship is not None else None
        if by is not None:  # "Which papers are by NAME?": the metadata answers, not the abstracts
            papers = [p for p in self.retriever.papers.values() if by_any(p, [by])]
            found = metadata.papers_by(by, papers, self.authors_recorded)
            yield from self._at_once(found, ask, query, history, timings, started)
            return
        retrieval = self.retrieve(ask, alone, self.sources_for(ask, k))
        lap("retrieve")
        verdict = self.judge.verdict(retrieval, ask)
        if ask.several and not said.several and len(verdict.hits) <= 1:
            # The model read a list that one paper at most answers: the question is about that paper,
            # every fact of it, as the rules read it (the model's reading adds, it never takes away).
            ask = self.analyse(question, query, lists=False)
            retrieval = self.retrieve(ask, alone, self.sources_for(ask, k))
            verdict = self.judge.verdict(retrieval, ask)
        lap("judge")
        sources, confidence, missing = verdict.hits, verdict.confidence, verdict.missing
        if alone is not None and retrieval is not alone:
            # A follow-up: its papers come from the conversation, its sentences from the question.
            sources = [self.retriever.rescored(hit, alone) for hit in sources]

        def first_piece() -> None:
            timings.setdefault("first_piece", (time.perf_counter() - started) * 1000)

        if ask.authorship is not None and sources:  # "Who wrote X?": X found, its authors from the metadata
            paper = ask.named[0] if ask.named else sources[0].paper
            yield from self._at_once(metadata.written_by(paper), ask, query, history, timings, started)
            return
        if not sources:
            refusal = metadata.MetadataAnswer(self.abstention(retrieval.hits, ask), [], "none")
            lap("generate")
            yield from self._at_once(refusal, ask, query, history, timings, started)
            return

        note = prompts.NOT_FOUND.format(phrase=missing.phrase) if missing else ""
        if confidence == "low" and missing is None:
            note = prompts.UNSURE  # another language's words: no part of it to name
        if ask.intent == "existence" and confidence == "high" and self.generator.verbatim:
            note = prompts.EXISTS  # "Is there work on ...?" answered by what the work is
        # A list or a table starts on a line of its own.
        joint = "\n\n" if ask.listing else " "
        if note:
            first_piece()
            yield Piece(note + joint)
        generator, fallback = self.generator, False
        tracker = CitationTracker(sources, self.grounding, self.settings.answering.support_threshold)
        pieces: list[str] = []
        try:
            for piece in generator.stream(ask, sources):
                shown = tracker.feed(piece)
                if shown:
                    first_piece()
                    pieces.append(shown)
                    yield Piece(shown)
            shown = tracker.finish()
            if shown:
                pieces.append(shown)
                yield Piece(shown)
            text = "".join(pieces)
            if not generator.verbatim and not tracker.citations and not _not_covered(text):
                raise GeneratorError("the language model's answer cited none of the sources")
        except GeneratorError:
            if not self.settings.llm.fallback or (pieces and generator.verbatim):
                raise
            # The fallback's answer replaces whatever was shown; the final Answer is authoritative.
            generator, fallback = self.fallback, True
            tracker = CitationTracker(sources, self.grounding, self.settings.answering.support_threshold)
            pieces = [tracker.feed(p) for p in generator.stream(ask, sources)]
            pieces.append(tracker.finish())
        text = "".join(pieces).strip()
        abstained = not tracker.citations and (not text or _not_covered(text))
        if abstained:
            text, confidence, missing, note = self.abstention(retrieval.hits, ask), "none", None, ""
        elif fallback:
            text = f"{text} {prompts.FALLBACK_NOTE}"
        if note:
            text = f"{note}{joint}{text}"
        lap("generate")
        timings["total"] = (time.perf_counter() - started) * 1000
        yield Done(
            self._observed(
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
                    held=0.0 if abstained else verdict.held,
                    question=question,
                    history=history,
                    ask=ask,
                )
            )
        )

    def _at_once(
        self, found: metadata.MetadataAnswer, ask: Ask, query: str, history: list[dict], timings: dict, started: float
    ) -> Iterator[Event]:
        """The piece and the Answer of an answer written whole, with no generator: a refusal, or
        what the corpus's metadata gives (rag/answer/metadata.py)."""
        timings["first_piece"] = timings["total"] = (time.perf_counter() - started) * 1000
        yield Piece(found.text)
        answer = Answer(
            found.text,
            found.citations,
            not found.citations,
            query,
            self.generator.name,
            timings=timings,
            confidence=found.confidence,
            missing=found.missing,
            held=1.0 if found.confidence == "high" else 0.0,
            question=ask.whole,
            history=history,
            ask=ask,
        )
        yield Done(self._observed(answer))

    def _observed(self, answer: Answer) -> Answer:
        if self.observer is not None:
            self.observer(answer)
        return answer

    def ask(self, question: str, history: list[dict] | None = None, k: int | None = None) -> Answer:
        *_, done = self.stream(question, history, k)
        assert isinstance(done, Done)  # the stream ends with the Answer
        return done.answer
