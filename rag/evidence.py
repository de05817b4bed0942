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
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache

from .config import EvidenceSettings
from .corpus import Paper, mentions
from .lexicon import Lexicon
from .text import HYPHENATED_WORD, STOPWORDS, stems

# Name-like words: an inner capital (nuScenes), a digit (QM9), two capitals (GRPO), or a
# capital letter not at the start of the question (a proper name).
_NAME_LIKE = re.compile(r"[A-Za-z]*[a-z][A-Z][\w-]*|[A-Za-z]+\d[\w-]*|[A-Z]{2,}[\w-]*|[A-Z][a-z][\w-]*")
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


# A suffix that says a thing is used, not which kind it is: "honeypot-based" is found where
# "honeypots" are ("training-free" keeps its "-free": it says which kind).
_GENERIC_SUFFIX = re.compile(r"(?<=\w)-(based|driven|powered|oriented|related|style|like|using)$", re.I)


# A stem found in a longer or shorter one (`Vocabulary.derived`): the shorter has this many letters
# or more, the longer this many more at most ("medic" / "medicin"; not "art" / "artist").
DERIVED_PREFIX, DERIVED_SUFFIX = 5, 2
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]*[A-Z0-9]s?")
_DASH = re.compile(r"[-\u2010-\u2014\s]+")


def _written(word: str, text: str) -> bool:
    """Whether the text writes the hyphenated word: its parts in order, joined by a hyphen, a dash
    or a space, each part in any form of its stem ("re-evaluating" in "re-evaluations", "fine-tuned"
    in "fine-tuning", "scaling-law" in "scaling laws"; "re" is not "reliable")."""
    parts = [part for part in word.split("-") if part]
    loose = [re.escape(p[:3] if p.isalpha() and len(p) >= 4 else p) + r"\w*" for p in parts]
    pattern = re.compile(r"(?<![\w-])" + r"[-\u2010-\u2014\s]".join(loose) + r"(?!\w)", re.IGNORECASE)
    for found in pattern.finditer(text):
        pieces = _DASH.split(found[0])
        if all(stems(piece) == stems(part) for piece, part in zip(pieces, parts, strict=True)):
            return True
    return False


def name_like(question: str) -> list[str]:
    """The words of a question that look like names (not its first word, which is capitalised anyway)."""
    return [
        m.group(0) for m in HYPHENATED_WORD.finditer(question) if m.start() > 0 and _NAME_LIKE.fullmatch(m.group(0))
    ]


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


class Vocabulary:
    """What the evidence reads of the corpus: the document frequencies of stems and the known
    words (the index's `Lexicon`, counted when it was built), and the stems of the few papers a
    question retrieves, counted when first asked for."""

    def __init__(self, lexicon: Lexicon, papers: Mapping[str, Paper]):
        self.papers = papers
        self.words = set(lexicon.words)
        # Every known word once, for names inside longer words: one scan per name-like word of a
        # question, over the vocabulary (which grows far slower than the papers).
        self.text = "\n".join(self.words)
        # Over papers; 0.5 is the smoothing the evidence weights (Settings.evidence) were fitted with.
        self.idf = lexicon.paper_idf(smoothing=0.5)
        pairs = [alias.split("=", 1) for alias in lexicon.aliases]
        self.aliases = {short: long for short, long in pairs}  # "rope" -> "rotary position embedding"
        self.long_forms = {long: short for short, long in pairs}
        self._stems = lru_cache(maxsize=4096)(self._count_stems)

    def _count_stems(self, paper_id: str) -> frozenset[str]:
        paper = self.papers.get(paper_id)
        return frozenset(stems(paper.text)) if paper is not None else frozenset()

    def stems_of(self, paper_id: str) -> frozenset[str]:
        """The stems of a paper's abstract (none for a paper not here)."""
        return self._stems(paper_id)

    def shares(
        self, question_stems: set[str], paper_id: str, alternatives: Sequence[Sequence[str]] = ()
    ) -> tuple[float, float]:
        """IDF-weighted shares of the question's stems: those the paper contains (its coverage),
        and those it lacks while another abstract contains them. Of `alternatives` ("spiking or
        binary neural networks": any one will do), a paper holding one is asked that one alone."""
        own = self.stems_of(paper_id)
        for group in alternatives:
            options = [stems(phrase) for phrase in group]
            held = [option for option in options if option <= own]
            if held:
                question_stems = question_stems - (set().union(*options) - set().union(*held))
        total = self.idf.total(question_stems)
        if not total:
            return 0.0, 0.0
        return (
            self.idf.total(question_stems & own) / total,
            self.idf.total(s for s in question_stems - own if s in self.idf) / total,
        )

    def found(self, word: str, paper_ids: list[str]) -> bool:
        """A question word is found in a paper when its stem is, or a lowercase word in another part
        of speech (`derived`); a hyphenated word only whole, as written or with a space, so that its
        modifier counts ("one-step" is not in "multi-step")."""
        head = _GENERIC_SUFFIX.sub("", word)
        if head != word:
            # ...unless a paper says it goes without ("training-based" is not "training-free").
            without = re.compile(rf"\b{re.escape(head)}[-\s](free|less)\b", re.I)
            if any((paper := self.papers.get(pid)) is not None and without.search(paper.text) for pid in paper_ids):
                return False
            word = head
        wanted = stems(word)
        if not wanted:
            return True
        if "-" in word.strip("-"):
            return any((paper := self.papers.get(pid)) is not None and _written(word, paper.text) for pid in paper_ids)
        # An acronym is found in its plural and back ("LLM" in "LLMs", "GNNs" in "GNN").
        forms = [wanted]
        if _ACRONYM.fullmatch(word):
            forms.append(stems(word[:-1] if word.endswith("s") else f"{word}s"))
        if any(form <= self.stems_of(pid) for form in forms for pid in paper_ids):
            return True
        return word.isalpha() and word.islower() and all(any(self.derived(s, pid) for pid in paper_ids) for s in wanted)

    def derived(self, stem: str, paper_id: str) -> bool:
        """A stem the paper holds in another part of speech, which the stemmer leaves apart:
        "medicin" (medicine) and "medic" (medical), "geometri" and "geometr" (geometric): one a prefix
        of the other, of `DERIVED_PREFIX` letters or more, the other longer by `DERIVED_SUFFIX` at most."""
        if len(stem) < DERIVED_PREFIX:
            return False
        return any(
            len(held) >= DERIVED_PREFIX
            and 0 < abs(len(held) - len(stem)) <= DERIVED_SUFFIX
            and (held.startswith(stem) or stem.startswith(held))
            for held in self.stems_of(paper_id)
        )

    def aliased(self, phrase: str, paper_ids: list[str]) -> set[str]:
        """The words of `phrase` (lowercased) that the papers hold under an alias the corpus
        defines: an abbreviation whose long form they contain, or a long form whose abbreviation
        they contain."""

        def held(text: str) -> bool:
            return any(stems(text) <= self.stems_of(pid) for pid in paper_ids)

        words = phrase.lower().split()
        out = {w for w in words if (long := self.long_form(w)) and held(long)}
        for start in range(len(words)):
            for end in range(start + 2, min(len(words), start + 8) + 1):
                abbreviation = self.long_forms.get(" ".join(words[start:end]))
                if abbreviation and held(abbreviation):
                    out.update(words[start:end])
        return out

    def long_form(self, abbreviation: str) -> str | None:
        """What a lowercased abbreviation stands for where the corpus defines it, plural or not."""
        return self.aliases.get(abbreviation, self.aliases.get(abbreviation.removesuffix("s")))

    def other_forms(self, phrase: str) -> list[str]:
        """The other form of a phrase the corpus defines an alias for: the long form of an
        abbreviation ("vlms" -> "vision-language models"), or the abbreviation of a long form."""
        lowered = " ".join(phrase.lower().split())
        return [form for form in (self.long_form(lowered), self.long_forms.get(lowered)) if form]

    def versions(self, word: str) -> list[str]:
        """The known words that are `word` with a version number ("Qwen" -> "qwen2", "qwen3"): a
        model family asked for by its name holds its versions."""
        if not re.fullmatch(r"[A-Za-z]{2,}", word):
            return []
        return re.findall(rf"^{re.escape(word.lower())}\d[\w.]*$", self.text, re.MULTILINE)

    def coverage(self, question_stems: set[str], paper_id: str) -> float:
        return self.shares(question_stems, paper_id)[0]

    def knows(self, word: str) -> bool:
        """ "LLM-generated" is known when "LLM" is, "PDEs" when "PDE" is, and a name of four
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
            1.0 if e.named else _sigmoid(w.bias + sum(a * b for a, b in zip(weights, x, strict=False)))
            for e, x in zip(evidence, several_features(evidence), strict=False)
        ]

    def weights(self, multilingual: bool):
        return self.settings.multilingual if multilingual else self.settings.english

    def assess(
        self,
        question: str,
        hits: list,
        multilingual: bool = False,
        asked: str | None = None,
        tied: Collection[str] = (),
        alternatives: Sequence[Sequence[str]] = (),
    ) -> list[Evidence]:
        """Evidence for each hit (a `retrieval.Hit`), in the hits' order. `question`: what was
        searched; `asked`: the user's own words when a follow-up was rewritten (default: `question`):
        only a paper named there, or `tied` to it by the question's analysis, is taken as the
        subject whatever the scores. `alternatives`: the question's constraints joined by "or"."""
        w = self.weights(multilingual)
        question_stems = stems(question)
        unknown = any(not self.vocabulary.knows(word) for word in name_like(question))
        out = []
        for i, hit in enumerate(hits):
            others = max((h.dense_score for j, h in enumerate(hits) if j != i), default=0.0)
            sentence = max(hit.sentence_scores.values(), default=0.0)
            named = hit.paper.paper_id in tied or mentions(asked or question, hit.paper.name)
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
            probability = 1.0 if named else _sigmoid(logit)
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
