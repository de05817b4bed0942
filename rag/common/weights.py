"""The weights that judge evidence and choose sentences: the evidence weights fitted by
eval/calibrate.py, read from rag/common/fitted_weights.toml (a data file that records what they
were fitted on), the framing tagger fitted by eval/tagger.py (rag/common/framing_tagger.json), and
the extractive generator's weights, chosen on dev."""

import json
import math
import numbers
import tomllib
from datetime import date
from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationInfo, field_validator

from rag.common.framing_weights import FramingWeights

FITTED_WEIGHTS = Path(__file__).with_name("fitted_weights.toml")


class EvidenceWeights(BaseModel):
    """P(a retrieved paper answers the question) = sigmoid(bias + sum of weight x feature)
    (rag/judge/evidence.py) and the probabilities that decide, for one question encoder."""

    bias: float = Field(le=0, description="Log-odds with no evidence at all.")
    dense: float = Field(ge=0, description="Per unit of the best question-chunk cosine.")
    sentence: float = Field(ge=0, description="Per unit of the best question-sentence cosine.")
    coverage: float = Field(ge=0, description="Per unit of IDF-weighted question words the paper contains.")
    margin: float = Field(ge=0, description="Per unit of dense lead over the best other retrieved paper.")
    unknown_name: float = Field(le=0, description="When the question names something no abstract contains.")
    elsewhere: float = Field(
        0.0, le=0, description="Per unit of IDF-weighted question words this paper lacks and another abstract contains."
    )
    answer_above: float = Field(
        ge=0,
        le=1,
        description="Abstain unless some paper reaches this (false abstention <= 3 % on dev, cross-validated).",
    )
    high_above: float = Field(
        ge=0,
        le=1,
        description="An answer is confident ('high') when every constraint of the question is found in its "
        "papers, or when its best paper reaches this probability...",
    )
    missing_below: float = Field(
        gt=0,
        le=1,
        description="...and the constraints of the question its papers lack weigh less than this share of the "
        "question's words (IDF-weighted); else the answer is 'low' and names the weightiest (fitted on dev, its "
        "leave-one-out variants and eval/dev_contrast.jsonl by eval/calibrate.py: precision of high >= 0.95).",
    )
    soft_above: float = Field(
        1.01,
        ge=0,
        le=1.01,
        description="A constraint of the question whose words the papers lack is still found when its best "
        "cosine with one of their sentences reaches this (other words for the same thing); above 1: words only.",
    )
    cite_share: float = Field(
        gt=0,
        le=1,
        description="A paper joins the answer when its probability is at least this share of the best one's.",
    )
    standalone_margin: float = Field(
        ge=0,
        le=1,
        description="In a conversation, a question stands alone when its best sentence beats the best sentence of "
        "the papers under discussion by this cosine: it names a topic of its own.",
    )


class SeveralWeights(BaseModel):
    """For "Which papers...?": P(a retrieved paper belongs in the answer) = sigmoid(bias + sum of
    weight x feature) (rag/judge/evidence.py). Being about the topic is judged against the best retrieved
    paper: a paper's gaps to the best one's scores count as well as the scores themselves."""

    bias: float = Field(description="Log-odds with no evidence at all.")
    dense: float = Field(description="Per unit of the best question-chunk cosine.")
    sentence: float = Field(description="Per unit of the best question-sentence cosine.")
    coverage: float = Field(description="Per unit of IDF-weighted question words the paper contains.")
    dense_gap: float = Field(description="Per unit of dense cosine above (0) or below (< 0) the best paper's.")
    sentence_gap: float = Field(description="The same for the sentence cosine.")
    coverage_gap: float = Field(description="The same for the coverage.")
    cite_above: float = Field(
        0.15,
        gt=0,
        lt=1,
        description="A paper is cited when it belongs at least this likely: a list or a summary that leaves a "
        "paper out fails its reader more than one extra line does, so this maximises F2 (recall weighted twice) "
        "on dev (554 questions: 0.35 -> 0.2 moves several-papers recall 0.861 -> 0.917, citation precision "
        "0.900 -> 0.852; 0.15 scores the same F2). 0.2 -> 0.15 on eval/dev_overview.jsonl (lists and summaries "
        "written blind, a keyword per paper): every keyword 14 -> 17 of 30, recall 0.864 -> 0.914, citation "
        "precision 0.712 -> 0.699 (0.12: the same 17; 0.10: 18 at precision 0.650); dev recall 0.922 -> 0.933, "
        "citation precision 0.864 -> 0.846.",
    )
    at_least: int = Field(
        2,
        ge=1,
        le=5,
        description="...and the likeliest papers up to this many are cited when each "
        "could answer alone (answer_above): 'which papers' expects more than one.",
    )


def _fitted(part: str) -> Any:
    """A part of the fitted weights (a copy): the default of EvidenceSettings' field of that name."""
    value = getattr(fitted(), part)
    return value.model_copy() if isinstance(value, BaseModel) else value


class EvidenceSettings(BaseModel):
    """The evidence weights the service answers with. Their values are in rag/common/fitted_weights.toml,
    fitted by `eval/calibrate.py --write` on the dev split and its leave-one-out variants, never on test,
    with what they were fitted on and how they did. Env: RAG_EVIDENCE__SEVERAL_CITE_SHARE,
    RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE..."""

    english: EvidenceWeights = Field(default_factory=lambda: _fitted("english"))
    multilingual: EvidenceWeights = Field(
        default_factory=lambda: _fitted("multilingual"),
        description="For questions in other languages, embedded by multilingual-e5: its cosines are squeezed near "
        "0.8 and fewer dev questions teach it, so its probabilities are less confident. Their words cannot be looked "
        "up in English abstracts, so nothing is named as missing: 'high' at high_above, else 'low' or none.",
    )
    several: SeveralWeights = Field(
        default_factory=lambda: _fitted("several"),
        description="Which papers an English list or summary cites (fitted by eval/calibrate.py on dev's "
        "questions answered as a list, their papers as the assistant retrieves and ties them).",
    )
    framing: FramingWeights = Field(
        default_factory=lambda: _fitted("framing"),
        description="Which missing constraints are framing, not what the question rests on (English).",
    )
    several_cite_share: float = Field(
        default_factory=lambda: _fitted("several_cite_share"),
        gt=0,
        le=1,
        description="cite_share for a question in another script that asks for several papers (哪些论文): "
        "too few such dev questions to fit `several` for multilingual-e5.",
    )

    @field_validator("english", "multilingual", "several", "framing", mode="before")
    @classmethod
    def _over_defaults(cls, value, info: ValidationInfo):
        """RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE=0.2 changes one number and keeps the others (at any depth:
        RAG_EVIDENCE__FRAMING__ASIDE__BELOW)."""
        if isinstance(value, dict):
            return _over(_fitted(str(info.field_name)).model_dump(), value)
        return value


def _over(default: dict[str, Any], value: dict[str, Any]) -> dict[str, Any]:
    """`value` over `default`, table by table."""
    return {
        **default,
        **{
            key: _over(default[key], given) if isinstance(given, dict) and isinstance(default.get(key), dict) else given
            for key, given in value.items()
        },
    }


class ExtractiveWeights(BaseModel):
    """How the extractive generator scores a sentence of a retrieved abstract as an answer
    (rag/answer/extractive.py). Chosen on the dev split (`rag eval --split dev`); env
    RAG_EXTRACTIVE__<NAME>."""

    cosine: float = Field(0.5, ge=0, description="Per unit of question-sentence cosine: what the sentence is about.")
    overlap: float = Field(0.6, ge=0, description="Per unit of IDF-weighted question words the sentence contains.")
    paper: float = Field(
        0.5,
        ge=0,
        description="Per unit of the paper's dense cosine below the best paper's: "
        "a less relevant paper's sentence needs a better score to lead.",
    )
    opening: float = Field(-0.05, le=0, description="The abstract's first sentence: background, rarely the finding.")
    contribution: float = Field(
        0.04, ge=0, description="'We propose/introduce/show...' or the paper's name: its finding."
    )
    definition: float = Field(
        0.3, ge=0, description="'What is X?' / 'What does X do?': the sentence that introduces X."
    )
    number: float = Field(0.15, ge=0, description="'How much/many?': a sentence with a number.")
    counted: float = Field(
        0.25, ge=0, description="...and more when the number counts a word of the question ('18 datasets')."
    )
    experiments: float = Field(
        0.2,
        ge=0,
        le=1,
        description="'On which datasets/environments...?': a sentence reporting "
        "experiments ('Experiments on MiniGrid and Craftax ...').",
    )
    boilerplate: float = Field(
        0.3, ge=0, description="'Code is available at...': up for a question about code, down otherwise."
    )
    motivation: float = Field(
        0.25,
        ge=0,
        le=1,
        description="'What problem / limitation does X address?': a sentence stating the problem "
        "('However, ... suffer from ...'), not the one proposing the fix (dev limitation keyword accuracy "
        "0.79 -> 0.89 against 0.15; flat to 0.35).",
    )
    contrast: float = Field(
        0.1,
        ge=0,
        le=1,
        description="'How does X compare with Y?': a sentence setting the paper against others ('outperforms', "
        "'unlike', 'more accurately than'). Dev comparisons' keyword accuracy 0.697 -> 0.727 (0.1 to 0.35 alike).",
    )
    mechanism: float = Field(
        0.1,
        ge=0,
        le=1,
        description="'How does X work?': a sentence saying how ('by ...', 'via ...', 'consists of ...').",
    )
    claim: float = Field(
        0.2,
        ge=0,
        le=1,
        description="'How does X work?' / 'What problem does X address?': a claim of results ('Experiments "
        "... demonstrate ...') down by this: it says how well, not how or why (dev, 589 questions: keyword "
        "accuracy 0.867 -> 0.872 against 0; 0.870 at 0.1, flat from 0.2 to 0.5).",
    )
    margin: float = Field(0.16, ge=0, le=1, description="Sentences within this score of the best one join the answer.")
    new_words: float = Field(
        0.2,
        ge=0,
        le=2,
        description="Per unit of IDF-weighted question words a sentence adds to those "
        "the answer already has: the sentences chosen together answer every part.",
    )
    max_sentences: int = Field(4, ge=1, le=10, description="Sentences in an answer about one or two papers.")
    explain_at_least: int = Field(
        4,
        ge=1,
        le=4,
        description="A how-it-works, limitation, existence or comparison answer from one paper has at least this "
        "many of its sentences: a mechanism, a problem or how a paper sets itself against others rarely fits in "
        "one or two (dev keyword accuracy: how-it-works 0.79 -> 0.83, limitation 0.79 -> 0.88 against 2; their "
        "answers 400 -> 550 characters; comparisons from one paper, 683 dev questions: 0.636 -> 0.697; 3 -> 4 on "
        "the 683: 0.852 -> 0.874, ten questions gained and none lost, median answer 528 -> 629 characters).",
    )
    per_paper: int = Field(
        2, ge=1, le=5, description="Sentences from one paper at most (but explain_at_least when it is the only one)."
    )
    max_papers: int = Field(
        6, ge=1, le=10, description="Papers an answer to 'which papers...?' cites at most, one sentence each."
    )
    aspect_sentences: int = Field(
        3,
        ge=1,
        le=5,
        description="A comparison's line per paper: its introduction, the sentence after it and this many of its "
        "best sentences on what is asked (dev comparisons with keywords, 55: 1 -> 43, 2 -> 46, 3 -> 48 answered "
        "with every keyword, none lost; the 12 written blind: 7, 8, 10; characters per answer 1025, 1244, 1429).",
    )
    list_sentences: int = Field(
        2,
        ge=1,
        le=4,
        description="A 'which papers...?' answer's line per paper: its best sentence on what is asked, then the one "
        "introducing the paper, the one after it, its next best (eval/dev_overview.jsonl, 30 lists and summaries "
        "written blind: every keyword 11 -> 14 at 2, 16 at 3; list lines 658 -> 1059 and 1556 characters; dev: one "
        "list gained, none lost).",
    )
    summary_of_one: int = Field(
        4,
        ge=1,
        le=8,
        description="A summary of one paper: what it brings (its introduction), how it works (the sentence after), "
        "what it finds first and last, and its next best sentences until it holds this many (eval/dev_summaries.jsonl, "
        "30 written blind: every keyword 12 of 30 with the first finding and 3 sentences, 18 with both at 4; "
        "median answer 750 characters).",
    )
    summary_sentences: int = Field(
        2,
        ge=1,
        le=5,
        description="A summary's line per paper: the sentence saying what it contributes, the one after its "
        "introduction (how it works), the introduction, its next best on what is asked (3 or 4: no keyword gained "
        "on dev or dev_overview).",
    )
    multilingual_spread: float = Field(
        0.25,
        gt=0,
        le=1,
        description="multilingual-e5 cosines vary about this much as MiniLM's: margins and bonuses shrink with them.",
    )


# The fitted weights' file: a header, then EvidenceSettings as TOML tables (english, multilingual,
# several, framing; several_cite_share at the top level), then [fit.*]: per part, when it was fitted, on
# which splits and how it did (the figures eval/calibrate.py prints). The settings read only the
# weights; every one must be there, and nothing else.
_HEADER = """\
# The evidence weights the service answers with: EvidenceSettings in rag/common/weights.py says what
# each one does. Read at start-up as the settings' defaults (RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE=...
# overrides one). Written by `eval/calibrate.py --write`, fitted on the dev side only, never on test:
# bias to answer_above of english and multilingual, english's high_above, missing_below and
# soft_above, multilingual's high_above, and several's bias to coverage_gap. Chosen by hand, and
# kept as they are by --write: cite_share and standalone_margin (rag eval --split dev),
# multilingual's missing_below and soft_above, several's cite_above and at_least, and
# several_cite_share. [framing]: written by
# `python -m eval.framing --write` (kept as it is by calibrate's --write), tagger_below and
# placed_below by `python -m eval.tagger --write` (tagger_below, the word's reading's, as first fitted);
# searched_below, searched_at_least, several_above, intent_above and
# intent_unless_several chosen by hand (rag eval on the dev side, docs/evaluation.md), kept by both;
# [framing.aside] by `python -m eval.aside --write`.
# [fit.*]: when each part was fitted, on which splits, and its cross-validated figures.
"""


@cache
def fitted() -> EvidenceSettings:
    """The evidence weights the service answers with (rag/common/fitted_weights.toml), read once."""
    return read_fitted(FITTED_WEIGHTS)


def read_fitted(path: Path) -> EvidenceSettings:
    """The evidence weights in a file `write_fitted` wrote."""
    with open(path, "rb") as file:
        data = tomllib.load(file)
    data.pop("fit", None)
    parts: dict[str, Any] = {}
    for name, model in _PARTS:
        table = data.pop(name, None)
        if not isinstance(table, dict) or set(table) != set(model.model_fields):
            given = sorted(table) if isinstance(table, dict) else table
            raise ValueError(f"{path}: [{name}] must hold {sorted(model.model_fields)}, not {given}")
        parts[name] = model(**table)
    if set(data) != {"several_cite_share"}:
        raise ValueError(f"{path}: at the top level only several_cite_share, not {sorted(data)}")
    return EvidenceSettings(**parts, several_cite_share=data["several_cite_share"])


_PARTS: tuple[tuple[str, type[BaseModel]], ...] = (
    ("english", EvidenceWeights),
    ("multilingual", EvidenceWeights),
    ("several", SeveralWeights),
    ("framing", FramingWeights),
)


def fit_record(splits: list[str], **figures: Any) -> dict[str, Any]:
    """One part's [fit.*] table: today's date, the splits it was fitted on, its figures."""
    return {"date": date.today().isoformat(), "splits": splits, **figures}


def write_fitted(path: Path, evidence: EvidenceSettings, fit: dict[str, dict[str, Any]]) -> None:
    """Write `evidence` and the record of its fit (`fit`: part -> its table, over the records `path`
    holds of the parts not refitted), as `read_fitted` reads them."""
    if path.exists():
        with open(path, "rb") as file:
            fit = {**tomllib.load(file).get("fit", {}), **fit}
    values = evidence.model_dump()
    tables = {name: values.pop(name) for name, _ in _PARTS}
    lines = [_HEADER, *_toml(values, ()), *_toml({**tables, "fit": fit}, ())]
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    fitted.cache_clear()
    if read_fitted(path) != evidence:  # never a file that reads back as other weights
        raise ValueError(f"{path} does not read back as the weights written")


def _toml(table: dict[str, Any], at: tuple[str, ...]) -> list[str]:
    """`table` as TOML lines: its values, then its tables, each under its [dotted.name]."""
    lines = [f"{key} = {_value(value)}" for key, value in table.items() if not isinstance(value, dict)]
    for key, value in table.items():
        if isinstance(value, dict):
            if any(not isinstance(v, dict) for v in value.values()):
                lines += ["", f"[{'.'.join((*at, key))}]"]
            lines += _toml(value, (*at, key))
    return lines


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, numbers.Integral):  # NumPy's integers too
        return str(int(value))
    if isinstance(value, numbers.Real) and math.isfinite(value):
        return repr(float(value))  # the shortest text that reads back as the same float
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} in the fitted weights' file")
