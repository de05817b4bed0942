"""Text helpers shared by retrieval, evidence, answer generation and citation checks: the
script of a question, its content words and their stems, and how rare a word is (IDF).

One module so that every part of the pipeline sees the same words.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from collections.abc import Iterable, Mapping
from functools import lru_cache

import Stemmer

CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
# A word with its hyphens ("LLM-generated"): how a question's name-like words and the corpus's
# known words (rag/index/lexicon.py) are cut, so that one is looked up in the other.
HYPHENATED_WORD = re.compile(r"[\w-]+")
STOPWORDS = frozenset(
    """a an the of in on for to and or but with by from as at is are was were be been being this that these
    those it its they their them we our us you your i he she his her which what who whom whose how why when
    where does do did can could should would may might will shall not no than then so such into over under
    about also more most very much many paper papers method methods approach model models propose proposed
    using use used based show shows shown new work study itself themselves""".split()
)


# A sentence that states what the paper contributes ("We propose X", "this paper introduces Y").
CONTRIBUTION = re.compile(r"\bwe (propose|introduce|present|develop|show|find|demonstrate)\b", re.I)
# The verbs (their stems) with which a paper says what it brings; "built" only in a paper's words
# ("we built"): a question's "built on X" asks for a use, not a contribution.
NEW_WORK_VERBS = "propos|introduc|present|develop|construct|build|releas|curat|creat"
NEW_WORK = re.compile(rf"\b(we|this (paper|work))\s+(\w+\s+)?({NEW_WORK_VERBS}|buil)\w*\b", re.I)

# A sentence saying where the paper's code is: not what the paper is about.
CODE_LINK = re.compile(r"https?://|\bcode (is|and)\b|\bavailable at\b|\bpublicly available\b", re.I)
# A question asking for a paper's code, where it is or whether it is out ("Is RLCracker's code
# available?", "Where can I find the code for ProtDiS?"); not code as a subject ("watermarks in code").
ASKS_FOR_CODE = re.compile(
    r"\b(where (can|could|is|are|do|does)|github|repo|repository|source code|implementation|"
    r"(its|their|the) (source )?code|code (for|of|is|are|available|released|public\w*)|"
    r"(releas\w*|open[- ]sourc\w*|publish\w*|shar\w*|provid\w*) (its |their |the |any )?(source )?code)\b",
    re.I,
)


def is_cjk(text: str) -> bool:
    """True when a question is written (mostly) in Chinese, Japanese or Korean script."""
    letters = [c for c in text if c.isalpha()]
    return bool(letters) and sum(bool(CJK.match(c)) for c in letters) / len(letters) > 0.3


def content_words(text: str) -> set[str]:
    """The lowercased words of `text` that say what it is about: no stopwords, no single letters."""
    return {w for w in (m.group(0).lower() for m in _WORD.finditer(text)) if w not in STOPWORDS and len(w) > 1}


@lru_cache(maxsize=1)
def _stemmer():
    return Stemmer.Stemmer("english")


def stems(text: str) -> set[str]:
    """The content words of `text`, Snowball-stemmed ("guarantees" and "guaranteed" agree)."""
    return set(_stemmer().stemWords(list(content_words(text))))


class IDF:
    """Inverse document frequency of terms: log((documents + 1) / (df + smoothing)) + offset. A
    term no document has weighs as df = 0, the most: a word the corpus has never seen is the
    rarest there is.

    `frequency`: term -> documents that contain it (rag/index/lexicon.py counts them when indexing);
    `smoothing` and `offset` are the caller's, since the weights built on top of each IDF were
    tuned with them.
    """

    def __init__(self, frequency: Mapping[str, int], documents: int, *, smoothing: float, offset: float = 0.0):
        self._weights = {
            term: math.log((documents + 1) / (df + smoothing)) + offset for term, df in frequency.items() if df > 0
        }
        self.unseen = math.log((documents + 1) / smoothing) + offset

    def __contains__(self, term: str) -> bool:
        """Some document has the term."""
        return term in self._weights

    def __getitem__(self, term: str) -> float:
        return self._weights.get(term, self.unseen)

    def total(self, terms: Iterable[str]) -> float:
        """The IDF mass of these terms."""
        return sum(self[term] for term in terms)


# "Which papers...?", "Are there other works on...?", 哪些论文: every paper that answers is cited.
# Not the verbs ("which paper studies X", "why it works") nor 哪些 of other things (哪些任务: tasks).
_SEVERAL = re.compile(
    r"\bpapers\b|\b(?:which|what|any|other|several|there)\s+(?:(?!paper\b|method\b|model\b)\w+\s+){0,2}?(?:works|studies)\b"
    r"|\bwhat\s+(?:other\s+)?(?:work|research)\s+(?:is there|exists|has been done)\b"
    r"|哪些[^，。？?]{0,6}?(?:论文|文章|工作|研究)",
    re.I,
)


def asks_for_several(question: str) -> bool:
    return bool(_SEVERAL.search(question))


_LOADING = threading.Lock()


def tagger(model: str):
    """spaCy's pipeline `model`, with what tags parts of speech and parses dependencies: imported
    and loaded once, by whichever thread asks first (about 1 s; the service, before it is healthy)."""
    with _LOADING:
        return _loaded_tagger(model)


def parsed(model: str, text: str):
    """`text` as spaCy's pipeline `model` tags and parses it, kept for the last questions: the
    analysis, the framing rules and the framing tagger read one parse of a question."""
    return _parse(tagger(model), text)


@lru_cache(maxsize=64)
def _parse(nlp, text: str):
    return nlp(text)


@lru_cache(maxsize=2)
def _loaded_tagger(model: str):
    return _spacy().load(model, exclude=["ner", "lemmatizer"])


@lru_cache(maxsize=1)
def function_words() -> frozenset[str]:
    """English's function words as spaCy lists them ("and", "of", "the"), imported as the tagger is."""
    with _LOADING:
        _spacy()
    from spacy.lang.en.stop_words import STOP_WORDS

    return frozenset(STOP_WORDS)


@lru_cache(maxsize=1)
def _spacy():
    # spaCy's thinc imports torch whenever it is installed (200 MB more in the service, which
    # embeds questions with ONNX); the tagger runs without it. Loaded before the service takes
    # requests, so no other thread imports torch meanwhile.
    blocked = "torch" not in sys.modules
    if blocked:
        sys.modules["torch"] = None  # type: ignore[assignment]
    try:
        import spacy
    finally:
        if blocked:
            del sys.modules["torch"]
    return spacy
