"""A question's words: its runs of content words, the words that look like names, and the kind
of sentence it asks for; `Reading` holds them for one text, made once by the analysis
(`rag.query.analysis.read`) and read by every later stage.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rag.common.text import (
    ASKS_FOR_CODE,
    HYPHENATED_WORD,
    NEW_WORK,
    NEW_WORK_VERBS,
    STOPWORDS,
    asks_for_several,
    content_words,
    parsed,
    stems,
)
from rag.query.language import ENGLISH, language_of

# Name-like words: an inner capital (nuScenes), a digit (QM9), two capitals (GRPO), or a
# capital letter not at the start of the question (a proper name).
# A word written as a name wherever it stands: inner capitals, a digit, or capitals ("LaBraM", "GPT4", "ODDS").
_ACRONYM = re.compile(r"[A-Za-z]*[a-z][A-Z][\w-]*|[A-Za-z]+\d[\w-]*|[A-Z]{2,}[\w-]*")
_NAME_LIKE = re.compile(rf"{_ACRONYM.pattern}|[A-Z][a-z][\w-]*")
# A question's words, hyphenated ones whole ("reinforcement-learning"), and the punctuation between them.
_QUESTION_TOKEN = re.compile(r"[^\W_][\w'’-]*|[^\w\s]")
# Words that shape a question rather than name what it asks about: never "the part not found".
# Among them the verbs that only say a paper is about something ("deal with", "analyze", "lets").
QUESTION_WORDS = frozenset(
    """there any exist exists existing some other kind kinds type types way ways report reports reported
    achieve achieves achieved give gives given get gets help helps make makes made provide provides one two
    three four five first second specific specifically particular main key like unlike whether just only
    still even instead rather across within without via per each every both either all name named called
    works studies research researchers authors author apply applies applied anyone anybody someone somebody
    has have had deal deals dealing involve involves involving analyze analyzes analyse analyses investigate
    investigates explore explores examine examines consider considers focus focuses target targets concern
    concerns tackle tackles handle handles discuss discusses cover covers designed intended let lets allow
    allows enable enables showing argue argues argued claim claims people""".split()
)


def name_like(question: str) -> list[str]:
    """The words of a question that look like names (not its first word, which is capitalised anyway)."""
    return [
        m.group(0) for m in HYPHENATED_WORD.finditer(question) if m.start() > 0 and _NAME_LIKE.fullmatch(m.group(0))
    ]


def acronyms(question: str) -> frozenset[str]:
    """The words a question writes as names wherever they stand ("the ODDS benchmark"), lowercased:
    never framing, whatever an ordinary word spelt the same would be ("odds")."""
    return frozenset(m.group(0).lower() for m in HYPHENATED_WORD.finditer(question) if _ACRONYM.fullmatch(m.group(0)))


def question_phrases(question: str) -> list[list[str]]:
    """Runs of adjacent content words of a question, in order; a stopword, a question word or
    punctuation ends a run ("Which paper applies Jacobi decoding to speed up autoregressive image
    generation?" -> [Jacobi, decoding], [speed], [autoregressive, image, generation])."""
    runs: list[list[str]] = []
    run: list[str] = []
    for match in _QUESTION_TOKEN.finditer(question):
        word = match.group(0)
        lowered = word.lower()
        if not word[0].isalnum() or len(lowered) < 2 or lowered in STOPWORDS or lowered in QUESTION_WORDS:
            if run:
                runs.append(run)
            run = []
        else:
            run.append(word)
    return runs + [run] if run else runs


# What kind of sentence a question asks for (read by the extractive answer through `Reading`).
# "Which paper / method ...?": answered by the best-ranked paper.
_WHICH = re.compile(
    r"\b(which|what)\s+(paper|method|model|framework|approach|benchmark|dataset|system)\b|\bname\b", re.I
)
# "How much / how many ...?", "what speedup": a sentence with a figure.
_HOW_MUCH = re.compile(
    r"\bhow (much|many|fast|large|big|long|often)\b"
    r"|\b(speed-?up|percent|accuracy|improvement|reduc\w*|gain|number|size|rate|by what)\b",
    re.I,
)
# "On which environments is X evaluated?", "Which benchmarks was it tested on?": the sentence that
# reports the experiments ("Experiments on MiniGrid and Craftax ...", "evaluated on 18 datasets").
_WHERE_TESTED = re.compile(
    r"\b(which|what)\s+(\w+\s+){0,2}?(datasets?|benchmarks?|environments?|tasks?|domains?|settings?|games?)\b"
    r"|\b(evaluated|tested|validated|benchmarked|experiments?)\s+(on|in|with)\b",
    re.I,
)
# "What is X?", "What does X do?", "What does X stand for?": answered by the sentence introducing X.
_DEFINITION = re.compile(
    r"^\W*what\s+(is|are)\s+[^,;?]{1,60}\??\W*$|\bstand for\b|^\W*what\s+does\s+[^,;?]{1,60}\s+do\W*$", re.I
)
# A question that asks for the datasets or benchmarks by name (not for the tasks or the settings).
_ASKS_DATA_NAMES = re.compile(r"\b(datasets?|benchmarks?|corpora)\b|数据集|基准", re.I)
# "What do the papers on X propose?": each paper's contribution is asked.
_ASKS_CONTRIBUTION = re.compile(r"\b(propos|introduc|contribut)\w*", re.I)
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
# "only convex (rather than strongly convex)": a word asked bare.
_ONLY = re.compile(r"\bonly\s+([A-Za-z][\w-]*)", re.I)
_PRONOUN = re.compile(r"\b(it|its|itself|they|them|their|this|these)\b|它|其", re.I)


@dataclass(frozen=True)
class Reading:
    """One text (a question less what it sets aside, a part of it, or the standalone query of a
    follow-up) as the later stages read it, derived once (`rag.query.analysis.read`)."""

    text: str
    stems: frozenset[str]  # of its content words (Snowball)
    content: frozenset[str]  # its content words, lowercased
    language: str  # ISO 639-1 (`rag.query.language.language_of`)
    several: bool  # asks for every paper that qualifies ("Which papers ...?")
    intent: str  # the kind of answer its own words ask for (`rag.query.analysis.Intent`)
    phrases: tuple[tuple[str, ...], ...]  # runs of content words (`question_phrases`)
    names: tuple[str, ...]  # words that look like names (`name_like`)
    which: bool  # "Which paper / method ...?"
    how_much: bool  # asks for a figure
    where_tested: bool  # asks where the experiments were run
    defining: bool  # "What is X?", "What does X do?"
    code: bool  # asks where the code is (`ASKS_FOR_CODE`)
    data_names: bool  # asks for the datasets or benchmarks by name
    contribution: bool  # asks what the papers contribute ("propose", "we introduce")
    new_work: bool  # asks for papers that bring something ("Which papers propose new benchmarks?")
    points_back: bool  # points back into a conversation ("it", "this method", "what about")
    pronoun: bool  # holds a pronoun that can stand for a paper of the conversation
    bare: frozenset[str]  # words asked bare, lowercased ("only convex": not "strongly convex")
    opening: frozenset[str]  # words capitalised only where a sentence opens ("Rundown of ..."): no names

    @property
    def foreign(self) -> bool:
        """Not English: matched by the multilingual encoder and judged by its evidence."""
        return self.language != ENGLISH


# A plain capitalised word where a sentence opens: capitalised for its place, not as a name.
_OPENING = re.compile(r"(?:^|(?<=[.?!:;])\s+)\W*([A-Z][a-z]+(?:-[a-z]+)*)\b")
_TITLE_CASE = re.compile(r"\b[A-Z][a-z]+(?:-[a-z]+)*\b")


def opening_words(text: str) -> frozenset[str]:
    """The words capitalised only where a sentence of `text` opens ("Rundown of the protein
    papers?", "Quick q: ..."); one capitalised anywhere else too is taken for a name."""
    opening = {m.start(1): m.group(1) for m in _OPENING.finditer(text)}
    elsewhere = {m.group(0) for m in _TITLE_CASE.finditer(text) if m.start() not in opening}
    return frozenset(opening.values()) - elsewhere


def reading(text: str, intent: str) -> Reading:
    """`text`'s `Reading`, given the intent its own words ask for (the analysis's `intent_of`)."""
    return Reading(
        text=text,
        stems=frozenset(stems(text)),
        content=frozenset(content_words(text)),
        language=language_of(text),
        several=asks_for_several(text),
        intent=intent,
        phrases=tuple(tuple(run) for run in question_phrases(text)),
        names=tuple(name_like(text)),
        which=bool(_WHICH.search(text)),
        how_much=bool(_HOW_MUCH.search(text)),
        where_tested=bool(_WHERE_TESTED.search(text)),
        defining=bool(_DEFINITION.search(text)),
        code=bool(ASKS_FOR_CODE.search(text)),
        data_names=bool(_ASKS_DATA_NAMES.search(text)),
        contribution=bool(NEW_WORK.search(text) or _ASKS_CONTRIBUTION.search(text)),
        new_work=bool(_ASKS_FOR_NEW.search(text)),
        points_back=bool(_FOLLOW_UP.search(text)),
        pronoun=bool(_PRONOUN.search(text)),
        bare=frozenset(word.lower() for word in _ONLY.findall(text)),
        opening=opening_words(text),
    )


# Determiners that pick out one thing ("which Lean geometry dataset", "the boundary-condition work").
_ONE_OF = frozenset({"which", "what", "the", "that", "this"})


def names_one(question: str, model: str) -> str | None:
    """The phrase by which a question picks out one thing (spaCy's parse, `model`): a determiner
    of `_ONE_OF`, then modifiers, then a singular noun with no prepositional phrase after it
    ("Which Lean geometry formalization dataset has ...?", "datasets built by the boundary-condition
    neural-operator work"); None when it has none, or says "each" (it asks of several things). A
    request for a list points at its papers in the plural or by their topic ("the work on X",
    "this pile"), so a question that names one thing is not read as one by a model of the question."""
    doc = parsed(model, question)
    if any(token.lower_ == "each" for token in doc):
        return None
    for token in doc:
        head = token.head
        if (
            token.lower_ in _ONE_OF
            and token.dep_ == "det"
            and head.tag_ == "NN"
            and any(child.dep_ in ("compound", "amod", "nmod") for child in head.lefts)
            and not any(child.dep_ == "prep" for child in head.rights)
        ):
            return doc[token.i : head.i + 1].text
    return None
