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

Their logistic weights live in `Settings.evidence` and were fitted on the dev questions and
their leave-one-out variants (eval/calibrate.py); the test split never chose them. Questions in
other scripts are matched by the multilingual model and have weights of their own.
Hand-written because no library scores answerability from retrieval evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

import Stemmer

from .citations import content_words
from .config import EvidenceSettings
from .corpus import Paper, mentions

# Name-like words: an inner capital (nuScenes), a digit (QM9), two capitals (GRPO), or a
# capital letter not at the start of the question (a proper name).
_NAME_LIKE = re.compile(r"[A-Za-z]*[a-z][A-Z][\w-]*|[A-Za-z]+\d[\w-]*|[A-Z]{2,}[\w-]*|[A-Z][a-z][\w-]*")
_TOKEN = re.compile(r"[\w-]+")


@lru_cache(maxsize=1)
def _stemmer():
    return Stemmer.Stemmer("english")


def stems(text: str) -> set[str]:
    """The content words of `text`, Snowball-stemmed ("guarantees" and "guaranteed" agree)."""
    return set(_stemmer().stemWords(list(content_words(text))))


def name_like(question: str) -> list[str]:
    """The words of a question that look like names (not its first word, which is capitalised anyway)."""
    return [m.group(0) for m in _TOKEN.finditer(question) if m.start() > 0 and _NAME_LIKE.fullmatch(m.group(0))]


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


class Vocabulary:
    """Document frequencies of stems and the set of words over a set of papers."""

    def __init__(self, papers: Iterable[Paper]):
        self.paper_stems: dict[str, set[str]] = {}
        self.words: set[str] = set()
        texts = []
        frequency: dict[str, int] = {}
        for paper in papers:
            own = stems(paper.text)
            self.paper_stems[paper.paper_id] = own
            for stem in own:
                frequency[stem] = frequency.get(stem, 0) + 1
            tokens = {t.lower() for t in _TOKEN.findall(paper.text)}
            self.words |= tokens | {part for t in tokens for part in t.split("-")}
            texts.append(paper.text.lower())
        self.text = "\n".join(texts)  # for names inside longer words; one scan per name-like word
        papers_count = len(self.paper_stems)
        self.idf = {stem: math.log((papers_count + 1) / (df + 0.5)) for stem, df in frequency.items()}
        self.unseen_idf = math.log((papers_count + 1) / 0.5)

    def weight(self, stem: str) -> float:
        return self.idf.get(stem, self.unseen_idf)

    def shares(self, question_stems: set[str], paper_id: str) -> tuple[float, float]:
        """IDF-weighted shares of the question's stems: those the paper contains (its coverage),
        and those it lacks while another abstract contains them."""
        total = sum(map(self.weight, question_stems))
        if not total:
            return 0.0, 0.0
        own = self.paper_stems.get(paper_id, set())
        return (sum(self.weight(s) for s in question_stems & own) / total,
                sum(self.idf[s] for s in question_stems - own if s in self.idf) / total)

    def coverage(self, question_stems: set[str], paper_id: str) -> float:
        return self.shares(question_stems, paper_id)[0]

    def knows(self, word: str) -> bool:
        """"LLM-generated" is known when "LLM" is, "PDEs" when "PDE" is, and a name of four
        letters or more when a word contains it ("Reddit" in "subreddit", "Llama" in "LLaMA-2")."""
        lowered = word.lower()
        base = re.sub(r"-[a-z]+$", "", lowered)
        if any(w in self.words for w in (lowered, base, lowered.rstrip("s"))):
            return True
        return len(base) >= 4 and base in self.text


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-max(-30.0, min(30.0, x))))


def several_features(evidence: list[Evidence]) -> list[list[float]]:
    """Per paper, in the order of `SEVERAL_FEATURES`: its scores and their gaps to the best of the list."""
    best = [max((getattr(e, name) for e in evidence), default=0.0) for name in ("dense", "sentence", "coverage")]
    return [[e.dense, e.sentence, e.coverage, e.dense - best[0], e.sentence - best[1], e.coverage - best[2]]
            for e in evidence]


SEVERAL_FEATURES = ("dense", "sentence", "coverage", "dense_gap", "sentence_gap", "coverage_gap")


class EvidenceModel:
    def __init__(self, vocabulary: Vocabulary, settings: EvidenceSettings):
        self.vocabulary = vocabulary
        self.settings = settings

    def belongs(self, evidence: list[Evidence]) -> list[float]:
        """For a question asking for several papers: P(each paper belongs in the answer)."""
        w = self.settings.several
        weights = [getattr(w, name) for name in SEVERAL_FEATURES]
        return [1.0 if e.named else _sigmoid(w.bias + sum(a * b for a, b in zip(weights, x)))
                for e, x in zip(evidence, several_features(evidence))]

    def weights(self, multilingual: bool):
        return self.settings.multilingual if multilingual else self.settings.english

    def assess(self, question: str, hits: list, multilingual: bool = False, asked: str | None = None) -> list[Evidence]:
        """Evidence for each hit (a `retrieval.Hit`), in the hits' order. `question`: what was
        searched; `asked`: the user's own words when a follow-up was rewritten (default: `question`):
        only a paper named there is taken as the subject whatever the scores."""
        w = self.weights(multilingual)
        question_stems = stems(question)
        unknown = any(not self.vocabulary.knows(word) for word in name_like(question))
        out = []
        for i, hit in enumerate(hits):
            others = max((h.dense_score for j, h in enumerate(hits) if j != i), default=0.0)
            sentence = max(hit.sentence_scores.values(), default=0.0)
            named = mentions(asked or question, hit.paper.name)
            coverage, elsewhere = self.vocabulary.shares(question_stems, hit.paper.paper_id)
            logit = (w.bias + w.dense * hit.dense_score + w.sentence * sentence + w.coverage * coverage
                     + w.margin * (hit.dense_score - others) + w.unknown_name * unknown + w.elsewhere * elsewhere)
            probability = 1.0 if named else _sigmoid(logit)
            out.append(Evidence(hit.paper.paper_id, hit.dense_score, sentence, coverage, hit.dense_score - others,
                                unknown, elsewhere, named, probability))
        return out
