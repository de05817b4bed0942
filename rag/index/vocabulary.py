"""The corpus's vocabulary as questions are matched against it: which papers hold a word (in any
form of its stem, hyphenated or as an acronym), the aliases the papers define, how much of a
question a paper covers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from functools import lru_cache

from wordfreq import zipf_frequency

from rag.common.text import function_words, stems
from rag.index.corpus import Paper
from rag.index.lexicon import Lexicon

# A suffix that says a thing is used, not which kind it is: "honeypot-based" is found where
# "honeypots" are ("training-free" keeps its "-free": it says which kind).
_GENERIC_SUFFIX = re.compile(r"(?<=\w)-(based|driven|powered|oriented|related|style|like|using)$", re.I)


# A stem found in a longer or shorter one (`Vocabulary.derived`): the shorter has this many letters
# or more, the longer this many more at most ("medic" / "medicin"; not "art" / "artist").
DERIVED_PREFIX, DERIVED_SUFFIX = 5, 2
_ACRONYM = re.compile(r"[A-Z][A-Z0-9]*[A-Z0-9]s?")
_DASH = re.compile(r"[-\u2010-\u2014\s]+")
# An abbreviation a paper may write out without defining it: two to five letters, two or more
# capitals, a plural "s" after them ("QA", "EnKF", "FMs"); each capital starts a word of the run.
_SHORT = re.compile(r"(?=(?:[a-z]*[A-Z]){2})[A-Z][A-Za-z]{1,4}")
# A clipped word ("nets", "params", "docs"): this many letters or more, and the papers' word this many more.
CLIPPED_LETTERS, CLIPPED_REST = 3, 3


def _spelled(abbreviation: str) -> str:
    """A pattern for the run of words an abbreviation's letters start ("EnKF": "En\\w*", "K\\w*",
    "F\\w*", joined by spaces, hyphens or dashes): "ensemble Kalman filter", "question-answer"."""
    short = re.sub(r"(?<=[A-Z])s$", "", abbreviation)
    starts = re.findall(r"[A-Z][a-z]*", short)
    return r"(?<![\w-])" + r"[-\u2010-\u2014\s]+".join(re.escape(start) + r"[a-z]*" for start in starts) + r"(?![\w])"


def _plain_run(run: str) -> bool:
    """A run of words that can stand for an abbreviation: neither its first nor its last a function
    word ("question answering", not "quality and")."""
    words = _DASH.split(run.strip().lower())
    return words[0] not in function_words() and words[-1] not in function_words()


def _written(word: str, text: str) -> bool:
    """Whether the text writes the hyphenated word: its parts in order, joined by a hyphen, a dash
    or a space, each part in any form of its stem ("re-evaluating" in "re-evaluations", "fine-tuned"
    in "fine-tuning", "scaling-law" in "scaling laws"; "re" is not "reliable")."""
    parts = [part for part in word.split("-") if part]
    loose = [re.escape(p[:3] if p.isalpha() and len(p) >= 4 else p) + r"\w*" for p in parts]
    if any(map(_SHORT.fullmatch, parts)):  # "QA-pair" in "question-answer pairs"
        spelled = [_spelled(p) if _SHORT.fullmatch(p) else re.escape(p) for p in parts]
        whole = re.compile(r"[-\u2010-\u2014\s]".join(spelled), re.IGNORECASE)
        if any(_plain_run(found[0]) for found in whole.finditer(text)):
            return True
    pattern = re.compile(r"(?<![\w-])" + r"[-\u2010-\u2014\s]".join(loose) + r"(?!\w)", re.IGNORECASE)
    for found in pattern.finditer(text):
        pieces = _DASH.split(found[0])
        if all(stems(piece) == stems(part) for piece, part in zip(pieces, parts, strict=True)):
            return True
    return False


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
        # Over papers; 0.5 is the smoothing the evidence weights (Settings.judging.evidence) were fitted with.
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
        self, question_stems: AbstractSet[str], paper_id: str, alternatives: Sequence[Sequence[str]] = ()
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
        if word.isalpha() and word.islower() and all(any(self.derived(s, pid) for pid in paper_ids) for s in wanted):
            return True
        return self.written_out(word, paper_ids)

    def written_out(self, word: str, paper_ids: list[str]) -> bool:
        """A shortened word the papers write out in full: an abbreviation they use without defining
        it ("EnKF": "ensemble Kalman filter", "FMs": "foundation models", "QA": "question-answer"),
        or a clipping of one of their words ("nets": "networks", "params": "parameters").
        Hand-written: scispaCy's abbreviation detector finds only defined ones (`aliased` does too)."""
        texts = [paper.text for pid in paper_ids if (paper := self.papers.get(pid)) is not None]
        if _SHORT.fullmatch(word):
            run = re.compile(_spelled(word), re.IGNORECASE)
            return any(_plain_run(found[0]) for text in texts for found in run.finditer(text))
        clipped = word.lower().removesuffix("s") if len(word) > CLIPPED_LETTERS else word.lower()
        if not word.isalpha() or len(clipped) < CLIPPED_LETTERS:
            return False
        # ...that English writes less often than the word it shortens ("art" is not "artist")
        asked = zipf_frequency(word, "en")
        longer = re.compile(rf"\b{re.escape(clipped)}[a-z]{{{CLIPPED_REST},}}", re.IGNORECASE)
        return any(zipf_frequency(full[0], "en") > asked for text in texts for full in longer.finditer(text))

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

    def coverage(self, question_stems: AbstractSet[str], paper_id: str) -> float:
        return self.shares(question_stems, paper_id)[0]

    def knows(self, word: str) -> bool:
        """ "LLM-generated" is known when "LLM" is, "PDEs" when "PDE" is, and a name of four
        letters or more when a word contains it ("Reddit" in "subreddit", "Llama" in "LLaMA-2")."""
        lowered = word.lower()
        base = re.sub(r"-[a-z]+$", "", lowered)
        if any(w in self.words for w in (lowered, base, lowered.rstrip("s"))):
            return True
        return len(base) >= 4 and base in self.text
