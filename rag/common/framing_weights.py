"""What decides a question's framing, apart from the evidence weights that hold them
(rag/common/weights.py): the framing tagger over words read in context (its own file,
framing_tagger.json, `python -m eval.tagger`), which missing constraints the question rests on
(`python -m eval.framing`) and which are the asker's aside (`python -m eval.aside`); and whether it
asks for every paper that qualifies (several.json, `python -m eval.several`) and what kind of answer
it asks for where no rule reads one (intent.json, `python -m eval.intent`)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, Field

FRAMING_TAGGER = Path(__file__).with_name("framing_tagger.json")
SEVERAL_MODEL = Path(__file__).with_name("several.json")
INTENT_MODEL = Path(__file__).with_name("intent.json")


def sigmoid(x: float) -> float:
    """The logistic function, its argument clamped so that exp never overflows: every fitted
    logistic model of the project (these, and the evidence's) reads its probability through it."""
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, x))))


class AsideWeights(BaseModel):
    """Whether a constraint is the asker's aside ("pathology core lab", "filling a spreadsheet"), not
    what the request needs: P(content) = sigmoid(bias + personal * its clause speaks of the asker ("my",
    "we") + apart * it sits in a sentence that is not the one asked + clause * the framing tagger's mean
    P(content) over the rest of its clause + inside * over its own words + clause_words * how many other
    words its clause has / 10). Reads the framing tagger's output, so it is refitted with it. Fitted
    by `python -m eval.aside` on the writers' labels of a dev-side split the tagger did not learn from."""

    bias: float = 0.0
    personal: float = Field(0.0, le=0, description="Per clause that holds a first-person word.")
    apart: float = Field(0.0, le=0, description="Per phrase in a sentence other than the question's.")
    clause: float = Field(
        0.0, ge=0, description="Per unit of the tagger's mean P(content) over the clause's other words."
    )
    inside: float = Field(0.0, ge=0, description="Per unit of the tagger's mean P(content) over the phrase's words.")
    clause_words: float = Field(0.0, ge=0, description="Per ten other words in the clause.")
    below: float = Field(
        0.0,
        ge=0,
        le=1,
        description="A constraint with P(content) under this is an aside: framing, never missing (0: off).",
    )

    def content(self, measures: Sequence[float]) -> float:
        """P(content) from `aside_measures`' (personal, apart, clause, inside, clause_words)."""
        personal, apart, clause, inside, clause_words = measures
        logit = (
            self.bias
            + self.personal * personal
            + self.apart * apart
            + self.clause * clause
            + self.inside * inside
            + self.clause_words * clause_words / 10
        )
        return sigmoid(logit)


class FramingWeights(BaseModel):
    """Whether a constraint of the question that no answering paper holds is one the question rests
    on, or a word of its framing that no rule knew ("the gist", "a rundown", "the key trick", "this
    pile"): P(it blocks `high`) = sigmoid(bias + salience * how much the question's meaning moves
    without it + common * its words' general-English frequency + match and least * how well the
    answering papers hold its words in context). One likely enough (`decisive_above`) makes the answer
    low whatever it weighs. Fitted by `python -m eval.framing` on the dev side (leave-one-paper-out), never on test."""

    bias: float = Field(description="Log-odds with no evidence.")
    salience: float = Field(
        ge=0,
        description="Per unit of 1 - cos(question, question without the phrase) under the English encoder: "
        "the meaning a question loses without a word it rests on.",
    )
    common: float = Field(
        le=0,
        description="Per Zipf unit (wordfreq) of its rarest missing word: everyday words frame, rare ones name.",
    )
    match: float = Field(
        0.0,
        description="Per unit of the mean, over its words, of each one's best cosine in context with a word of the "
        "answering papers (rag/judge/constraints.py `held_in_context`): content said in the papers' other words.",
    )
    least: float = Field(0.0, description="...and per unit of its least held word's.")
    block_above: float = Field(
        ge=0,
        le=1,
        description="The probability from which a missing constraint is one the question rests on (blocks "
        "`high`, can be named); under it, it is framing: neither missing nor named.",
    )
    decisive_above: float = Field(
        1.0,
        ge=0,
        le=1.01,
        description="...and from which it makes the answer low whatever it weighs; between the two it is weighed "
        "by its share of the question (missing_below).",
    )
    tagger_below: float = Field(
        0.0,
        ge=0,
        le=1,
        description="A question's word that the framing tagger (rag/common/framing_tagger.json) reads as content "
        "with a probability under this is framing, never missing, as the spaCy tagger's verbs are (0: tagger off).",
    )
    placed_below: float = Field(
        0.0,
        ge=0,
        le=1,
        description="...and one that its reading of where the word sits in the question puts under this is framing "
        "too ('..., for our data catalog'): it adds to the word's own reading, never takes away (0: not read).",
    )
    searched_below: float = Field(
        0.0,
        ge=0,
        le=1,
        description="...and one it reads as content under this is left out of what is retrieved and weighed as "
        "evidence (an aside dilutes both); stricter than tagger_below, since a content word left out is lost to "
        "retrieval where one not named is only not named (0: searched as asked).",
    )
    searched_at_least: int = Field(
        2,
        ge=1,
        le=20,
        description='...and only when at least this many of its words are: one framing verb ("Which paper '
        "proposes ...\") is the plain question's form, which the evidence was fitted on; an aside is several.",
    )

    several_above: float = Field(
        0.7,
        ge=0,
        le=1,
        description="An English question the several model (rag/common/several.json) reads as asking for every "
        'paper that qualifies with a probability from this is a list, as "Which papers ...?" is (0: off); '
        "one that a paper at most answers is read again as the rules read it.",
    )

    intent_above: float = Field(
        0.3,
        ge=0,
        le=1,
        description="An English question whose form no rule reads as an intent ('other') takes the intent "
        "model's (rag/common/intent.json) likeliest intent of one paper when its probability is from this "
        "(0: off): 'how does the fix keep uncertainty alive?' is answered as how it works, with every sentence "
        "the rules' reading chooses kept (`Ask.rules_read`).",
    )

    intent_unless_several: float = Field(
        0.5,
        gt=0,
        le=1,
        description="...unless the several model reads it as asking for several papers with a probability from "
        "this (its own decision boundary: fitted with the classes weighed alike): a request for a list "
        "answered as one paper's mechanism cites one paper.",
    )

    aside: AsideWeights = Field(default_factory=AsideWeights, description="Which constraints are asides.")

    def logit(self, salience: float, common: float, match: float, least: float) -> float:
        """The log-odds that the question rests on a missing constraint with these measures: what the
        verdict and eval/framing.py's simulation of it both read."""
        return self.bias + self.salience * salience + self.common * common + self.match * match + self.least * least


class FramingTagger(BaseModel):
    """P(a word of a question is content, not framing), read two ways. The word itself: a logistic
    regression over its vector in context (one layer of the English encoder, the mean of its pieces) and
    its Zipf frequency / 7 (wordfreq), which knows a request's words ("machinery", "the gist"). Where it
    sits: a network of one hidden layer (ReLU units) over the same and its place in the question
    (rag/query/framing.py `structure`, from the parse of `parser`), which knows an aside's place ("...,
    for our data catalog"); a word either reads as framing is framing (`FramingWeights`). Both fitted by
    `python -m eval.tagger` on the dev-side questions whose writers listed their constraints and framing
    words. Read only with the encoder and parser it was fitted on."""

    encoder: str = Field(description="The English encoder (RAG_EMBEDDING_MODEL) whose vectors it reads.")
    layer: int | None = Field(
        None, ge=1, description="The encoder's layer it reads (None: the last); eval/tagger.py says why that one."
    )
    bias: float = Field(description="The word's reading: its bias.")
    zipf: float = Field(description="The word's reading: per Zipf unit / 7 of the word (wordfreq, English).")
    vector: list[float] = Field(description="The word's reading: per component of the word's unit vector in context.")
    parser: str = Field(description="The spaCy pipeline whose parse says where a word sits (RAG_JUDGING__TAGGER_MODEL)")
    hidden: list[list[float]] = Field(
        description="Where it sits: per hidden unit, its weights over the inputs (the word's vector, its Zipf "
        "frequency / 7, where it sits)."
    )
    hidden_bias: list[float] = Field(description="Where it sits: per hidden unit.")
    output: list[float] = Field(description="Where it sits: per hidden unit, its weight in the logit.")
    output_bias: float = Field(description="Where it sits: the logit's bias.")
    fit: dict[str, Any] = Field(default_factory=dict, description="When and on what it was fitted, how it did.")

    def content(self, vectors: np.ndarray, zipfs: np.ndarray) -> np.ndarray:
        """The word's reading: P(content) for each row of `vectors` (a word's unit vector in context)
        and its Zipf frequency."""
        logit = self.bias + vectors @ np.asarray(self.vector, dtype=np.float32) + self.zipf * zipfs / 7
        return 1.0 / (1.0 + np.exp(-logit))

    def placed(self, inputs: np.ndarray) -> np.ndarray:
        """Where it sits: P(content) for rows of inputs (the word's vector, its Zipf frequency / 7, `structure`)."""
        units = np.maximum(inputs @ np.asarray(self.hidden, dtype=np.float32).T + np.asarray(self.hidden_bias), 0.0)
        logit = self.output_bias + units @ np.asarray(self.output, dtype=np.float32)
        return 1.0 / (1.0 + np.exp(-np.clip(logit, -30.0, 30.0)))


@cache
def framing_tagger() -> FramingTagger | None:
    """The fitted framing tagger (rag/common/framing_tagger.json), read once; None before one is fitted."""
    if not FRAMING_TAGGER.is_file():
        return None
    return FramingTagger.model_validate_json(FRAMING_TAGGER.read_text(encoding="utf-8"))


class SeveralModel(BaseModel):
    """P(a question asks for every paper that qualifies) = sigmoid(bias + vector . the question's vector
    (`question_vector`)): a logistic regression fitted by `python -m eval.several` on the dev-side
    questions whose writers labelled their intent. It reaches the casual requests for a list that the
    rule ("Which papers ...?") does not ("protein modeling work, line 'em up"). Read only with the
    encoder and the framing tagger it was fitted with (it reads the tagger's layer)."""

    encoder: str = Field(description="The English encoder (RAG_EMBEDDING_MODEL) whose vectors it reads.")
    layer: int | None = Field(None, ge=1, description="The encoder's layer it reads: the framing tagger's.")
    bias: float
    vector: list[float] = Field(description="Per component of the question's vector.")
    fit: dict[str, Any] = Field(default_factory=dict, description="When and on what it was fitted, how it did.")

    def several(self, vector: np.ndarray) -> float:
        """P(several) for a question's vector."""
        logit = self.bias + float(vector @ np.asarray(self.vector, dtype=np.float32))
        return sigmoid(logit)


def question_vector(pieces: np.ndarray) -> np.ndarray:
    """A question's unit vector: the mean of its word pieces' vectors at one layer of the English encoder
    (`TokenVectors.at`: the judge reads the framing tagger's layer anyway, no second encoding)."""
    mean = pieces.mean(axis=0) if len(pieces) else np.zeros(pieces.shape[1], dtype=np.float32)
    return mean / max(float(np.linalg.norm(mean)), 1e-12)


@cache
def several_model() -> SeveralModel | None:
    """The fitted model of requests for several papers (rag/common/several.json), read once; None
    before one is fitted."""
    if not SEVERAL_MODEL.is_file():
        return None
    return SeveralModel.model_validate_json(SEVERAL_MODEL.read_text(encoding="utf-8"))


class IntentModel(BaseModel):
    """P(each intent | a question) = softmax(bias + weights . the question's vector (`question_vector`)):
    a multinomial logistic regression fitted by `python -m eval.intent` on the dev-side questions whose
    writers labelled their intent. It reads the kind of answer a casual question asks for where the
    rules of `intent_of` read none ("whats the fix", "params pls"). Read only with the encoder it
    was fitted on, at its layer."""

    encoder: str = Field(description="The English encoder (RAG_EMBEDDING_MODEL) whose vectors it reads.")
    layer: int | None = Field(None, ge=1, description="The encoder's layer it reads (None: the last).")
    intents: list[str] = Field(min_length=2, description="The classes, in the order of bias and weights.")
    bias: list[float]
    weights: list[list[float]] = Field(description="Per intent, per component of the question's vector.")
    fit: dict[str, Any] = Field(default_factory=dict, description="When and on what it was fitted, how it did.")

    def likeliest(self, vector: np.ndarray) -> tuple[str, float]:
        """The likeliest intent for a question's vector, and its probability."""
        logits = np.asarray(self.bias) + np.asarray(self.weights, dtype=np.float32) @ vector
        shares = np.exp(logits - logits.max())
        best = int(np.argmax(shares))
        return self.intents[best], float(shares[best] / shares.sum())


@cache
def intent_model() -> IntentModel | None:
    """The fitted intent model (rag/common/intent.json), read once; None before one is fitted."""
    if not INTENT_MODEL.is_file():
        return None
    return IntentModel.model_validate_json(INTENT_MODEL.read_text(encoding="utf-8"))
