"""Citation markers in an answer: parsed, checked against the sources, renumbered.

`[n]`, `[1, 3]`, `[1-2]` and `[1][2]` are understood. A marker that points to no source, or
whose sentence its source does not support, never reaches the user; the remaining sources are
numbered 1..m in order of first use. Works incrementally so a streamed answer can be cleaned as
it arrives: plain text passes through at once, and from the first `[` of a sentence the rest of
that sentence waits until the sentence ends and its markers have been checked.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rag.retrieve.retrieval import Hit

from rag.common.text import content_words

MARKER = re.compile(r"\[\s*(\d{1,3}(?:\s*(?:[,;\-–]|and)\s*\d{1,3})*)\s*\]")
_RUN = re.compile(rf"{MARKER.pattern}(?:\s*{MARKER.pattern})*")  # [1][2] and [1] [2, 3] cite together
# A sentence ends at the first whitespace after . ! ? (so "3.5" is not an end, and where a streamed
# piece cuts a run of spaces does not move the end), at CJK punctuation, or at the line break
# that ends a table row or starts a list item or a row (a marker never holds "|" or "- ").
_SENTENCE_END = re.compile(r"(?<=[.!?])\s|(?<=[。！？])|(?<=\|)\n|\n(?=[ \t]*(?:[-*] |\|))")


def lexical_support(sentence: str, source: str) -> float:
    """Share of the sentence's content words that occur in the source."""
    words = content_words(MARKER.sub(" ", sentence))
    if not words:
        return 1.0
    return len(words & content_words(source)) / len(words)


def parse_marker(body: str) -> list[int]:
    """'1, 3' -> [1, 3]; '2-4' -> [2, 3, 4] (ranges capped at 10 numbers)."""
    numbers: list[int] = []
    for part in re.split(r"\s*(?:[,;]|and)\s*", body):
        bounds = re.split(r"\s*[\-–]\s*", part)
        if len(bounds) == 2 and bounds[0].isdigit() and bounds[1].isdigit():
            lo, hi = int(bounds[0]), int(bounds[1])
            numbers.extend(range(lo, min(hi, lo + 9) + 1) if lo <= hi else [])
        elif part.strip().isdigit():
            numbers.append(int(part))
    return numbers


@dataclass
class Citation:
    n: int
    paper_id: str
    name: str
    text: str
    snippet: str
    code_url: str | None = None
    authors: list[str] = field(default_factory=list)  # where the corpus records them

    def to_dict(self) -> dict:
        shown = {
            "n": self.n,
            "paper_id": self.paper_id,
            "name": self.name,
            "text": self.text,
            "snippet": self.snippet,
            "code_url": self.code_url,
        }
        return shown | ({"authors": list(self.authors)} if self.authors else {})


@dataclass
class CitationTracker:
    """Feed answer text in pieces; get back text safe to show, with checked, renumbered markers.

    `sources` are the hits handed to the generator, numbered from 1. `grounding(sentence, hit)`
    returns how well the hit grounds the sentence and its best sentence for it; a citation
    scoring under `threshold` is dropped.
    """

    sources: list
    grounding: Callable[[str, Hit], tuple[float, str]]
    threshold: float
    citations: list[Citation] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    _renumber: dict[int, int] = field(default_factory=dict)
    _pending: str = ""  # text of the current sentence not yet released
    _released: str = ""  # text of the current sentence already released (its support counts)
    _held: bool = False  # the current sentence has a "[" and waits for its end

    def feed(self, piece: str) -> str:
        out = []
        text, start = self._pending + piece, 0
        for end in _SENTENCE_END.finditer(text):  # one pass, not re-slicing: linear in the answer
            out.append(self._resolve(text[start : end.end()]))
            self._held, self._released, start = False, "", end.end()
        rest = text[start:]
        self._held = self._held or "[" in rest
        if not self._held and rest:
            # Release plain text now, keeping back the last word and the spaces before it: a "["
            # may follow, and a dropped marker takes those spaces with it.
            head = rest.rstrip().rsplit(None, 1)
            if len(head) == 2:
                cut = len(head[0])
                out.append(rest[:cut])
                self._released += rest[:cut]
                rest = rest[cut:]
        self._pending = rest
        return "".join(out)

    def finish(self) -> str:
        rest = self._resolve(self._pending) if self._pending else ""
        self._pending, self._released, self._held = "", "", False
        return rest

    def _resolve(self, held: str) -> str:
        """`held`: the unreleased end of a sentence; markers are checked against the whole sentence.

        Only the markers and the space a dropped one leaves behind change: the words between them
        are kept as written, so the text does not depend on how the answer was cut into pieces."""
        if not MARKER.search(held):
            return held
        sentence = self._released + held
        plain = re.sub(r"\s+([.,;:!?])", r"\1", " ".join(MARKER.sub(" ", sentence).split()))
        checked: dict[int, int | None] = {}  # source number -> new number, None if unsupported
        texts: list[list[str]] = [[]]  # the text between the markers kept
        markers: list[str] = []
        pos = 0
        for run in _RUN.finditer(held):
            kept = []
            for number in (n for m in MARKER.finditer(run.group(0)) for n in parse_marker(m.group(1))):
                if not 1 <= number <= len(self.sources):
                    self.dropped.append(number)
                    continue
                if number not in checked:
                    checked[number] = self._cite(number, plain)
                elif checked[number] is None:
                    self.dropped.append(number)
                new = checked[number]
                if new is not None and new not in kept:
                    kept.append(new)
            before, after = held[pos : run.start()], held[run.end() : run.end() + 1]
            if not kept and (not after or after.isspace() or after in ".,;:!?"):
                before = before.rstrip()  # "holds [9]." -> "holds."
            texts[-1].append(before)
            if kept:
                markers.append("".join(f"[{n}]" for n in kept))
                texts.append([])
            pos = run.end()
        texts[-1].append(held[pos:])
        out = [_unmarked("".join(texts[0]))]
        for marker, text in zip(markers, texts[1:], strict=False):
            out += [marker, _unmarked("".join(text))]
        return "".join(out)

    def _cite(self, number: int, plain: str) -> int | None:
        hit = self.sources[number - 1]
        score, snippet = self.grounding(plain, hit)
        if score < self.threshold:
            self.dropped.append(number)
            return None
        if number not in self._renumber:
            self._renumber[number] = len(self._renumber) + 1
            paper = hit.paper
            self.citations.append(
                Citation(
                    self._renumber[number],
                    paper.paper_id,
                    paper.display_name,
                    paper.text,
                    snippet,
                    paper.code_url,
                    list(paper.authors),
                )
            )
        return self._renumber[number]


def _unmarked(text: str) -> str:
    """Text around a dropped marker can close into a new, unchecked one ("[1[9]]" -> "[1]"): drop it."""
    while MARKER.search(text):
        text = MARKER.sub("", text)
    return text


def clean_answer(text: str, sources: list, grounding, threshold: float) -> tuple[str, list[Citation], list[int]]:
    """The whole-text form of CitationTracker: (clean text, citations, dropped numbers)."""
    tracker = CitationTracker(sources, grounding, threshold)
    cleaned = tracker.feed(text) + tracker.finish()
    return cleaned.strip(), tracker.citations, tracker.dropped
