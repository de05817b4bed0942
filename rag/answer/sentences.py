"""What a sentence of an abstract says, as the extractive answer reads it: a figure, a finding,
a claim of results, the problem a paper takes on, how its method works, the data it is
evaluated on, the sentence introducing it; and the sentence retold in the third person.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from rag.common.text import CONTRIBUTION, NEW_WORK_VERBS, stems
from rag.index.corpus import mentions
from rag.retrieve.retrieval import Hit

NUMBER = re.compile(r"\d")
# A count or a figure, in digits or in words ("twelve downstream tasks").
QUANTITY = re.compile(
    r"\d|\b(one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|dozens?|hundreds?|thousands?|"
    r"millions?|twice|double[sd]?|triple[sd]?|half|halves|halving)\b",
    re.I,
)
# A figure a result is reported in: "12.2x", "9.1$\\times$", "40%", "3-fold", "by 15 points".
FIGURE = re.compile(
    r"\d(?:[\d,.]*\d)?\s*(?:\\?%|\$?\\times\$?|×|x\b|-?fold\b|times\b|points?\b|pp\b)|\b(?:up to|by|of|to) \*?\d",
    re.I,
)
# "What problem does X address?": the sentences stating the problem or its cause.
PROBLEM = re.compile(
    r"\b(however|yet|but|despite|although|remains?|suffer\w*|limit\w*|fail\w*|struggl\w*|challeng\w*|bottleneck\w*|"
    r"costly|expensive|incompatible|lack\w*|difficult\w*|unclear|overlook\w*|neglect\w*|ignor\w*|prone|"
    r"existing|current|prior|previous|conventional|standard|traditional|typically|often|rely|relies)\b",
    re.I,
)
# "How does X work?": the sentences saying how.
MECHANISM = re.compile(
    r"\b(by|via|through|consists? of|compris\w*|first\w*|then|which|leverag\w*|combin\w*|replac\w*|uses?)\b", re.I
)
# The sentence naming what a paper is evaluated on: a named benchmark or dataset ("LongBench",
# "ImageNet-1K", "Dream-7B"), or a count of them ("18 datasets").
NAMES_DATA = re.compile(
    r"\b[A-Z][\w-]*[A-Z0-9][\w-]*\b|\b\d+\s+(\w+\s+)?(datasets?|benchmarks?|tasks?|environments?)\b"
)
# A dataset or benchmark named as where something was done: "perplexity on WikiText-2", "across LongBench".
DATA_NAMED = re.compile(r"\b(on|in|across|using|with|from|over)\s+(the\s+)?([\w-]+\s+){0,3}?[A-Z][\w-]*[A-Z0-9][\w-]*")
DATA_COUNTED = re.compile(r"\b\d+\s+(\w+\s+)?(datasets?|benchmarks?|tasks?|environments?)\b")
# Datasets listed by name after the word: "low-temperature benchmarks including Ising, Potts".
DATA_LISTED = re.compile(
    r"\b(datasets?|benchmarks?|tasks?|environments?|suites?)\b[^.;]{0,40}?\b(including|such as|like|namely)\s+[A-Z]"
)
# A dataset or benchmark the paper makes: "the authors release *TC-Bench*, a foundational global dataset".
DATA_MADE = re.compile(
    r"\b(?i:releas|introduc|present|construct|curat|collect|buil)\w*\b[^.;]{0,40}?\b[A-Z][\w-]*[A-Z0-9][\w-]*"
    r"[^.;]{0,40}?\b(?i:datasets?|benchmarks?|corpus|corpora|suite)\b"
)
EXPERIMENTS = re.compile(
    r"\b(experiments?|evaluat\w*|tested|validat\w*|benchmarks?|results)\b[^.;]{0,40}?\b(on|in|across)\b", re.I
)
# A sentence claiming results rather than saying what the method does: "Extensive experiments
# against 13 baselines demonstrate ...", "Through extensive experiments, it attains ...".
RESULT_CLAIM = re.compile(
    r"\b(experiments?|results|evaluations?|empirically)\b[^.;]*?\b(show|demonstrat|confirm|indicat|reveal|"
    r"outperform|achiev|attain|surpass)\w*",
    re.I,
)
# What a paper finds: a result it reports or a claim it shows ("Experiments show ...", "we prove",
# "X achieves state-of-the-art", "a 50% improvement"); not a size it sets up ("models of 7B").
FINDING = re.compile(
    RESULT_CLAIM.pattern + r"|\b(we|this (paper|work))\s+(\w+\s+)?(show|find|found|prove|demonstrat|observ|report)\w*\b"
    r"|\b(outperform|surpass)\w*|\b(achieves|achieved|attains|attained)\b|\bstate-of-the-art\b"
    r"|\d[\d.,]*\s*(\\?%|×|\$?\\times|x\b|-?fold\b|times\b)",
    re.I,
)
# "How does X compare with Y?": a sentence setting the paper against others ("outperforms", "unlike",
# "more accurately than", "whereas", "compared with").
CONTRASTS = re.compile(
    r"\b(than|outperform\w*|surpass\w*|unlike|whereas|while|compared (to|with)|versus|vs\.?|in contrast|"
    r"rather|instead|beyond|over (the )?(\w+ )?baselines?)\b",
    re.I,
)
# The sentence in which an abstract says what its work is, named or not ("In this work, we present
# the first theoretical analysis of ...", "We systematically investigate ...").
PRESENTS_WORK = re.compile(
    rf"\b(we|this (paper|work|study))\s+(\w+\s+)?({NEW_WORK_VERBS}|buil|"
    r"investigat|stud|analy[sz]|examin|explor|establish|provid|formali[sz]|derive)\w*\b",
    re.I,
)
LEAD_IN = re.compile(
    r"^(?:(?:to (?:address|tackle|overcome|bridge|close|mitigate|solve)[^,]{0,60}|in this (?:work|paper)|here|"
    r"specifically|moreover|furthermore|additionally|finally|however|therefore|thus|in particular|"
    r"based on (?:this|these)[^,]{0,40}|building on[^,]{0,60}|motivated by[^,]{0,60}|leveraging[^,]{0,60}|"
    r"crucially|empirically|theoretically|consequently|to this end|as a result|instead),\s*)+",
    re.I,
)


def counts(question_stems: AbstractSet[str], sentence: str) -> bool:
    """A number right before a word of the question: "18 challenging datasets" for "how many datasets"."""
    for match in re.finditer(r"\d[\d,.]*\s+((?:[^\W\d]+\s+){0,2}[^\W\d]+)", sentence):
        if stems(match.group(1)) & question_stems:
            return True
    return False


def introduces(sentence: str, name: str) -> bool:
    """The sentence that presents a paper's method: "we propose X", "X, a ...", "X is a ..."."""
    if not mentions(sentence, name):
        return False
    named = re.escape(name)
    return (
        bool(CONTRIBUTION.search(sentence))
        or re.search(rf"{named}\W{{0,3}}(\([^)]*\))?\W{{0,3}}(a|an|which|that|is|are)\b|\(\s*{named}\s*\)", sentence)
        is not None
    )


def third_person(sentence: str) -> str:
    """Drop a connective opening and say "the authors" for "we", so a sentence reads as an answer."""
    text = LEAD_IN.sub("", sentence.replace("**", "")).strip()
    text = re.sub(r"\bwe\b", "the authors", text)
    text = re.sub(r"\bWe\b", "The authors", text)
    text = re.sub(r"\bour\b", "their", text)
    text = re.sub(r"\bOur\b", "Their", text)
    text = re.sub(r"\bus\b", "them", text)
    return text[:1].upper() + text[1:]


@dataclass
class Candidate:
    """A sentence of a source abstract, scored as an answer to the question."""

    source: int  # the source's number in the answer, from 1
    sentence: str
    score: float
    asked: frozenset[str] = frozenset()  # the question's words (stems) this sentence contains


def mechanism(own: list[Candidate], after: str | None) -> Candidate | None:
    """`after`, the sentence after a paper's introduction (`own`: its scored sentences), when it
    says how the method works rather than claims a result."""
    return next((c for c in own if c.sentence == after and not RESULT_CLAIM.search(c.sentence)), None)


def method_sentences(source: Hit, what: Candidate | None) -> list[str]:
    """The sentences that say what a paper's method is and how it works: `what`, the one
    introducing it, then those after it that do not claim results (the background before it
    says neither)."""
    if what is None:
        return []
    order = list(source.sentence_scores)
    return [what.sentence, *(s for s in order[order.index(what.sentence) + 1 :] if not RESULT_CLAIM.search(s))]


def introduction(own: list[Candidate], order: list[str], name: str) -> tuple[Candidate | None, str | None]:
    """A paper's sentence introducing its method, and the sentence after it, which most often
    says how the method works (`order`: the abstract's sentences)."""
    by_sentence = {c.sentence: c for c in own}
    ours = [by_sentence[s] for s in order if s in by_sentence]
    # A paper without a name (a fifth of the seeds) is introduced by its first "we present ...".
    what = next((c for c in ours if introduces(c.sentence, name)), None) or next(
        (c for c in ours if PRESENTS_WORK.search(c.sentence)), None
    )
    after = order[order.index(what.sentence) + 1] if what and what.sentence != order[-1] else None
    return what, after


def gives(wants: str, sentence: str, name: str) -> int:
    """How well a sentence of the paper `name` can answer a part expecting `wants` (0: not at all):
    a figure for a number; for the data, a dataset named where something was run or counted (not
    the paper's own name), best in the sentence reporting the experiments."""
    if wants == "number":
        return int(bool(FIGURE.search(sentence)))
    if wants == "dataset":
        own = sentence.replace(name, "")
        names = bool(DATA_NAMED.search(own) or DATA_COUNTED.search(own) or DATA_LISTED.search(own))
        return names + (names and bool(EXPERIMENTS.search(own)))
    return 1


def absent_from(sentences: list[str], name: str, wants: AbstractSet[str], data_names: bool) -> str:
    """A plain word for an asked part that the one paper asked about (`name`, its `sentences`) does
    not give: its benchmarks (`data_names`: the question asks them by name), or a figure."""
    if (
        "dataset" in wants
        and data_names
        and not any(DATA_NAMED.search(s.replace(name, "")) or DATA_MADE.search(s) for s in sentences)
    ):
        return f"{name}'s abstract does not name the datasets or benchmarks it is evaluated on."
    if "number" in wants and not any(QUANTITY.search(s.replace(name, "")) for s in sentences):
        return f"{name}'s abstract gives no figure for this."
    return ""


def joined(first: list[Candidate], then: Iterable[Candidate]) -> list[Candidate]:
    """`first`, then each of `then` whose sentence is not among them, in its order: what adds to an
    answer and never takes a sentence away."""
    taken = {c.sentence for c in first}
    return [*first, *(c for c in then if c.sentence not in taken)]
