"""Does a retrieved paper answer the question? A calibrated probability from measurable evidence.

Three decisions rest on it: abstain (no paper is likely enough), which papers an answer cites
(those close to the best one), and whether a question asked in a conversation stands on its
own (its own best paper is likely enough). The evidence for one paper:

- `dense`: the best cosine between the question and one of the paper's chunks;
- `sentence`: the best cosine between the question and one of the paper's sentences;
- `coverage`: the IDF-weighted share of the question's content words (stemmed) that the paper
  contains: rare words ("watermark", "Mamba2") count for more than common ones ("model");
- `margin`: how far the paper's dense cosine leads the best other retrieved paper's: an answer
  stands out, an adjacent topic does not;
- `unknown_name`: the question names something (an acronym, a capitalised or digit-bearing
  word) that no abstract contains: the corpus cannot be about it;
- `elsewhere`: the IDF-weighted share of the question's content words that this paper lacks
  and other abstracts contain: the question asks about something the corpus has, but not here.

Their logistic weights live in `Settings.judging.evidence` and were fitted on the dev questions and
their leave-one-out variants (eval/calibrate.py); the test split never chose them. Questions in
other languages are matched by the multilingual model and have weights of their own, fitted on
dev's questions in other languages (eval/data/dev_multilingual.jsonl) and theirs left out.
Hand-written because no library scores answerability from retrieval evidence.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from rag.common.framing_weights import sigmoid
from rag.common.weights import EvidenceSettings
from rag.index.corpus import mentions
from rag.index.vocabulary import Vocabulary
from rag.query.words import Reading


@dataclass(frozen=True)
class Missing:
    """The most salient part of a question that none of the given abstracts contains."""

    phrase: str  # words of the question, as written ("image generation")
    share: float  # the IDF weight of its missing words, as a share of the whole question's


@dataclass(frozen=True)
class Evidence:
    paper_id: str
    dense: float
    sentence: float
    coverage: float
    margin: float
    unknown_name: bool
    elsewhere: float
    named: bool  # the question names this paper: it is about it, whatever the scores say
    probability: float

    def features(self) -> list[float]:
        """In the order of `FEATURES` (what eval/calibrate.py fits)."""
        return [self.dense, self.sentence, self.coverage, self.margin, float(self.unknown_name), self.elsewhere]


FEATURES = ("dense", "sentence", "coverage", "margin", "unknown_name", "elsewhere")


def several_features(evidence: list[Evidence]) -> list[list[float]]:
    """Per paper, in the order of `SEVERAL_FEATURES`: its scores and their gaps to the best of the list."""
    best = [max((getattr(e, name) for e in evidence), default=0.0) for name in ("dense", "sentence", "coverage")]
    return [
        [e.dense, e.sentence, e.coverage, e.dense - best[0], e.sentence - best[1], e.coverage - best[2]]
        for e in evidence
    ]


SEVERAL_FEATURES = ("dense", "sentence", "coverage", "dense_gap", "sentence_gap", "coverage_gap")


class EvidenceModel:
    def __init__(self, vocabulary: Vocabulary, settings: EvidenceSettings):
        self.vocabulary = vocabulary
        self.settings = settings

    def belongs(self, evidence: list[Evidence]) -> list[float]:
        """For a question asking for several papers: P(each paper belongs in the answer)."""
        w = self.settings.several
        weights = [getattr(w, name) for name in SEVERAL_FEATURES]
        return [
            1.0 if e.named else sigmoid(w.bias + sum(a * b for a, b in zip(weights, x, strict=False)))
            for e, x in zip(evidence, several_features(evidence), strict=False)
        ]

    def weights(self, multilingual: bool):
        return self.settings.multilingual if multilingual else self.settings.english

    def assess(
        self,
        searched: Reading,
        hits: list,
        multilingual: bool = False,
        asked: str | None = None,
        tied: Collection[str] = (),
        alternatives: Sequence[Sequence[str]] = (),
    ) -> list[Evidence]:
        """Evidence for each hit (a `retrieval.Hit`), in the hits' order. `searched`: what was
        searched, as the analysis read it; `asked`: the user's own words when a follow-up was
        rewritten (default: what was searched): only a paper named there, or `tied` to it by the
        question's analysis, is taken as the subject whatever the scores. `alternatives`: the
        question's constraints joined by "or"."""
        w = self.weights(multilingual)
        question_stems = searched.stems
        unknown = any(not self.vocabulary.knows(word) for word in searched.names)
        out = []
        for i, hit in enumerate(hits):
            others = max((h.dense_score for j, h in enumerate(hits) if j != i), default=0.0)
            sentence = max(hit.sentence_scores.values(), default=0.0)
            named = hit.paper.paper_id in tied or mentions(asked or searched.text, hit.paper.name)
            coverage, elsewhere = self.vocabulary.shares(question_stems, hit.paper.paper_id, alternatives)
            logit = (
                w.bias
                + w.dense * hit.dense_score
                + w.sentence * sentence
                + w.coverage * coverage
                + w.margin * (hit.dense_score - others)
                + w.unknown_name * unknown
                + w.elsewhere * elsewhere
            )
            probability = 1.0 if named else sigmoid(logit)
            out.append(
                Evidence(
                    hit.paper.paper_id,
                    hit.dense_score,
                    sentence,
                    coverage,
                    hit.dense_score - others,
                    unknown,
                    elsewhere,
                    named,
                    probability,
                )
            )
        return out
