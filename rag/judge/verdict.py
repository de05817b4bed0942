"""The verdict: which retrieved papers answer a question, how confidently, and what none holds.

From the best paper's calibrated probability (rag/judge/evidence.py) and the question's
constraints found in the papers (rag/judge/constraints.py): none below `answer_above` (abstain);
high when every constraint is found (framing, as the framing model judges it, counts as found), or
at `high_above` or more when those not found weigh less than `missing_below` of the question and
none is another thing (a name, a modifier: `ConstraintCheck.other`) or one the question likely
rests on (`FramingWeights.decisive_above`); low otherwise, naming the weightiest constraint not
found in the question's words. Questions in other languages, whose words are not matched, are high
at `high_above`, else low naming nothing.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import lru_cache, partial
from typing import Literal, cast

import numpy as np
from wordfreq import zipf_frequency

from rag.common.framing_weights import (
    FramingTagger,
    IntentModel,
    SeveralModel,
    framing_tagger,
    intent_model,
    question_vector,
    several_model,
    sigmoid,
)
from rag.common.settings import Settings
from rag.common.text import ASKS_FOR_CODE, stems
from rag.common.weights import EvidenceWeights
from rag.index.corpus import mentions
from rag.index.stores.base import REBUILD_HINT, SearchIndex
from rag.index.tokens import ReadsTokens, TokenVectors
from rag.index.vocabulary import Vocabulary
from rag.judge.constraints import ConstraintCheck, Papers, content_pieces, either, heaviest_unfound, held_share
from rag.judge.constraints import check as check_constraints
from rag.judge.evidence import Evidence, EvidenceModel, Missing
from rag.query.analysis import ONE_PAPER_INTENTS, Ask, Intent
from rag.query.framing import aside_words, framed_below, framing_words, tagged
from rag.retrieve.retrieval import Hit, Retrieval

Confidence = Literal["high", "low", "none"]
log = logging.getLogger("rag.judge")


@dataclass(frozen=True)
class Verdict:
    """What the retrieved papers can answer of a question (`Judge.verdict`)."""

    hits: list[Hit]  # the papers that answer; empty: abstain
    confidence: Confidence
    missing: Missing | None  # the constraint a low answer names
    held: float  # `Answer.held`: how much of the question the papers hold
    best: float  # the best paper's probability of answering
    checks: tuple[ConstraintCheck, ...] = ()  # the question's constraints in the papers (none: not checked)


class Judge:
    """Decides a verdict from the evidence and the constraints; one per index and settings."""

    def __init__(self, index: SearchIndex, vocabulary: Vocabulary, settings: Settings):
        self.index = index
        self.vocabulary = vocabulary
        self.settings = settings
        self.evidence = EvidenceModel(vocabulary, settings.judging.evidence)
        # A paper's content word pieces in context, read when a constraint of a question it answers
        # is missing; the last `token_cache_papers` papers read are kept.
        self._reader = cast(ReadsTokens, index.embedder)  # either English encoder (rag/index/embedding.py)
        self._pieces = lru_cache(maxsize=settings.judging.token_cache_papers)(self._read_pieces)
        # A question's pieces in context, read once for its analysis (`framed`) and its constraints,
        # and its words as the framing tagger reads them, once for every threshold and the asides.
        self._question = lru_cache(maxsize=64)(self._read_question)
        self._tagged = lru_cache(maxsize=64)(self._tag_question)
        self._vector = lru_cache(maxsize=64)(self._question_vector)
        # The framing tagger reads the vectors of the encoder and the parse of the pipeline it was
        # fitted on, no other's.
        model = framing_tagger()
        self.tagger: FramingTagger | None = model
        configured = (settings.indexing.embedding_model, settings.judging.tagger_model)
        if model is not None and (model.encoder, model.parser) != configured:
            log.warning(
                "the framing tagger was fitted on %s and %s, not %s and %s: not used",
                model.encoder,
                model.parser,
                *configured,
            )
            self.tagger = None
        elif model is not None and model.layer is not None and not self._reads(model.layer):
            log.warning(
                "the framing tagger reads the English encoder's layer %d, which this index's export does not give"
                " (built before it): not used; %s",
                model.layer,
                REBUILD_HINT,
            )
            self.tagger = None
        # The models of the question read the layer the tagger reads, of the encoder all were fitted on.
        tagger = self.tagger
        reads = (tagger.encoder, tagger.layer) if tagger is not None else None
        several, intents = several_model(), intent_model()
        self.several_model: SeveralModel | None = several if self._fits(several, reads, "several") else None
        self.intent_model: IntentModel | None = intents if self._fits(intents, reads, "intent") else None
        zipf_frequency("paper", "en")  # wordfreq's list loads here (0.3 s), not on the first question

    @staticmethod
    def _fits(model: SeveralModel | IntentModel | None, reads: tuple[str, int | None] | None, name: str) -> bool:
        """Whether a model of the question reads what the tagger reads (`reads`: its encoder and layer)."""
        if model is None:
            return False
        if (model.encoder, model.layer) != reads:
            log.warning("the %s model does not read this encoder's framing tagger layer: not used", name)
            return False
        return True

    def _reads(self, layer: int) -> bool:
        """The English encoder gives `layer` (an export made before the tagger read one does not)."""
        return layer in self._reader.tokens(["probe"], layer)[0].layers

    def weights(self, retrieval: Retrieval) -> EvidenceWeights:
        return self.evidence.weights(retrieval.multilingual)

    def candidates(self, retrieval: Retrieval, tied: Collection[str], listing: bool = False) -> list[Hit]:
        """The papers an answer may use: the first `answer_sources` hits (`list_sources` for a
        list), and those the question's analysis ties to it."""
        first = self.settings.answering.list_sources if listing else self.settings.answering.answer_sources
        return retrieval.hits[:first] + [h for h in retrieval.hits[first:] if h.paper.paper_id in tied]

    def assess(self, retrieval: Retrieval, ask: Ask) -> list[Evidence]:
        """Evidence for the papers an answer may use; the papers the question itself names (not
        those a follow-up borrowed) count as named."""
        hits = self.candidates(retrieval, ask.tied, ask.listing)
        said, tied = ask.said.text, ask.tied
        return self.evidence.assess(ask.sought, hits, retrieval.multilingual, said, tied, ask.alternatives)

    def verdict(self, retrieval: Retrieval, ask: Ask) -> Verdict:
        """The papers that answer, how confidently, and the part of the question none of them
        contains (see the module's docstring); the papers the analysis ties to the question are
        taken as answering."""
        evidence = self.assess(retrieval, ask)
        several = ask.searched.several or ask.intent in ("list", "summary")
        hits = self._sources(self.candidates(retrieval, ask.tied, ask.listing), evidence, retrieval, several)
        if ask.only:
            hits = [hit for hit in hits if hit.paper.paper_id in ask.only]
        if not hits:
            return Verdict([], "none", None, 0.0, max((e.probability for e in evidence), default=0.0))
        w = self.weights(retrieval)
        best = max(e.probability for e in evidence)
        if retrieval.multilingual:
            return Verdict(hits, *(("high", None, 1.0) if best >= w.high_above else ("low", None, 0.0)), best)
        checks = tuple(either(self.check_constraints(hits, ask, w.soft_above), ask.alternatives, w.soft_above))
        held = held_share(best, checks, w.high_above, w.soft_above)
        unfound = heaviest_unfound(checks, w.soft_above)
        framing = self.settings.judging.evidence.framing
        decisive = any(c.rests >= framing.decisive_above for c in checks if not c.found(w.soft_above))
        if unfound is None or (held > 1.0 - w.missing_below and not decisive):
            return Verdict(hits, "high", None, held, best, checks)
        return Verdict(hits, "low", Missing(unfound.as_asked(ask.said.text), unfound.weight), held, best, checks)

    def check_constraints(self, hits: list[Hit], ask: Ask, soft_above: float) -> list[ConstraintCheck]:
        """Each constraint of the question against the answering papers (rag/judge/constraints.py)."""
        framing = self.settings.judging.evidence.framing

        def rests_on(salience: float, common: float, match: float, least: float) -> float:
            """The probability that the question rests on a missing constraint (`FramingWeights`)."""
            return sigmoid(framing.logit(salience, common, match, least))

        def embed(phrases: list[str]) -> np.ndarray:
            rows = np.asarray(self.index.embedder.get_text_embedding_batch(phrases), dtype=np.float32)
            return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)

        # A question about named papers asks it of them, not of a neighbour that holds the words.
        named = {p.paper_id for p in ask.named}
        hits = [hit for hit in hits if hit.paper.paper_id in named] or hits
        vectors = [hit.sentences.vectors for hit in hits if len(hit.sentences.texts)]
        question_tokens = partial(self._question, ask.said.text)
        papers = Papers(
            [hit.paper.paper_id for hit in hits],
            np.vstack(vectors) if vectors else np.zeros((0, 1), dtype=np.float32),
            [text for hit in hits for text in hit.sentences.texts],
            self.naming(hits, ask.said.text),
            question_tokens,
            lambda: np.vstack([self._pieces(hit.paper.paper_id) for hit in hits]),
        )

        return check_constraints(
            ask.constraints,
            ask.said,
            papers,
            self.vocabulary,
            embed,
            term_uses=self.settings.judging.modifier_term_uses,
            framing=lambda: framing_words(ask.said.text, self.settings.judging.tagger_model),
            tagged=partial(self.framed, ask.said.text, placed=True),
            aside=partial(self.asides, ask.said.text, ask.constraints),
            soft_above=soft_above,
            rests_on=rests_on if framing.block_above > 0 else None,
            block_above=framing.block_above,
        )

    def framed(self, question: str, below: float | None = None, placed: bool = False) -> frozenset[str]:
        """The words of an English question the framing tagger reads as framing (`framed_below`)
        under `below` (by default `tagger_below`), and with `placed` those its reading of where they
        sit puts under `placed_below`, less those of what the analysis reads it as asking for (where
        the code is: "the code"); none with the tagger off."""
        framing = self.settings.judging.evidence.framing
        below = framing.tagger_below if below is None else below
        if self.tagger is None or below <= 0:
            return frozenset()
        words = framed_below(self._tagged(question, False), below)
        if placed and framing.placed_below > 0:
            words |= framed_below(self._tagged(question, True), framing.placed_below)
        return words - {w.lower() for m in ASKS_FOR_CODE.finditer(question) for w in m.group(0).split()}

    def several(self, question: str, above: float | None = None) -> bool:
        """An English question the several model reads as asking for every paper that qualifies
        (`SeveralModel`) with a probability from `above` (default `several_above`; 0: never)."""
        above = self.settings.judging.evidence.framing.several_above if above is None else above
        model = self.several_model
        if model is None or above <= 0:
            return False
        return model.several(self._vector(question)) >= above

    def intent(self, question: str) -> Intent | None:
        """The intent of one paper (`ONE_PAPER_INTENTS`) the intent model reads an English question as
        asking for, when likely from `intent_above` and the question is not one the several model reads
        as a request for several papers (`intent_unless_several`); None with it off."""
        framing = self.settings.judging.evidence.framing
        model = self.intent_model
        if model is None or framing.intent_above <= 0 or self.several(question, framing.intent_unless_several):
            return None
        intent, probability = model.likeliest(self._vector(question))
        return intent if intent in ONE_PAPER_INTENTS and probability >= framing.intent_above else None

    def asides(self, question: str, constraints: Sequence[str]) -> frozenset[str]:
        """The words of the constraints the aside model reads as the asker's aside (`aside_words`);
        none with it or the tagger off."""
        aside = self.settings.judging.evidence.framing.aside
        if self.tagger is None or aside.below <= 0 or not constraints:
            return frozenset()
        return aside_words(question, constraints, self._tagged(question, False), aside)

    def _read_question(self, question: str) -> TokenVectors:
        """One read gives what the tagger reads (its layer) and the last layer."""
        return self._reader.tokens([question], self.tagger.layer if self.tagger is not None else None)[0]

    def _question_vector(self, question: str) -> np.ndarray:
        """The question's vector at the tagger's layer, which both models of the question read (`_fits`),
        computed once for the several model and the intent model."""
        return question_vector(self._question(question).at(cast(FramingTagger, self.tagger).layer))

    def _tag_question(self, question: str, placed: bool) -> list[tuple[str, tuple[int, int], float]]:
        return tagged(question, self._question(question), cast(FramingTagger, self.tagger), placed)

    def _read_pieces(self, paper_id: str) -> np.ndarray:
        return content_pieces(self._reader.tokens(self.index.sentences_of([paper_id])[paper_id].texts))

    @staticmethod
    def naming(hits: list[Hit], asked: str) -> frozenset[str]:
        """The stems of the paper names the question uses: they pick the paper, not what is asked of it."""
        return frozenset(stem for hit in hits if mentions(asked, hit.paper.name) for stem in stems(hit.paper.name))

    def _sources(self, hits: list[Hit], evidence: list[Evidence], retrieval: Retrieval, several: bool) -> list[Hit]:
        best = max((e.probability for e in evidence), default=0.0)
        if best < self.weights(retrieval).answer_above:
            return []
        if several and not retrieval.multilingual:
            rules = self.settings.judging.evidence.several
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
        share = self.settings.judging.evidence.several_cite_share if several else self.weights(retrieval).cite_share
        return [hit for hit, e in zip(hits, evidence, strict=False) if e.probability >= share * best]
