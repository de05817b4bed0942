"""What a question is matched against that would otherwise be read from every paper: how many
papers (and sentences) hold each word, and the papers' names.

Counted once, when the corpus is indexed, and stored with the build (`Lexicon.save`), so a
question costs the same at 86 papers and at 100,000: it looks up its own words and scans
itself for names, and never loops over the papers. A replica reads the counts instead of
re-reading every abstract at start.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from rag.common.text import HYPHENATED_WORD, IDF, stems
from rag.index.corpus import Paper


def words_of(text: str) -> set[str]:
    """The lowercased words of `text` and the parts of its hyphenated ones ("LLM-generated" ->
    llm-generated, llm, generated): what a name in a question is looked up against."""
    tokens = {t.lower() for t in HYPHENATED_WORD.findall(text)}
    return tokens | {part for t in tokens for part in t.split("-")}


@dataclass
class Lexicon:
    """Document frequencies of a corpus: of stems and words over its papers, of stems over its sentences."""

    papers: int
    stems: dict[str, int]  # stem -> papers that contain it (evidence coverage, the BM25 weight)
    words: dict[str, int]  # lowercased word or hyphen part -> papers that contain it (known names)
    sentences: int
    sentence_stems: dict[str, int]  # stem -> sentences that contain it (the extractive answer's word weights)
    # "abbreviation=long form" as the papers define them ("rope=rotary position embedding") ->
    # papers that define it: counted like the rest, so that leaving papers out removes theirs
    aliases: dict[str, int] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Lexicon:
        return cls(0, {}, {}, 0, {})

    @classmethod
    def count(cls, papers: Iterable[Paper], sentences: Iterable[str]) -> Lexicon:
        stem_df: Counter[str] = Counter()
        word_df: Counter[str] = Counter()
        alias_df: Counter[str] = Counter()
        n = 0
        for paper in papers:
            n += 1
            stem_df.update(stems(paper.text))
            word_df.update(words_of(paper.text))
            alias_df.update(f"{short}={long}" for short, long in aliases_in(paper.text).items())
        sentence_df: Counter[str] = Counter()
        s = 0
        for sentence in sentences:
            s += 1
            sentence_df.update(stems(sentence))
        return cls(n, dict(stem_df), dict(word_df), s, dict(sentence_df), dict(alias_df))

    def without(self, papers: Iterable[Paper]) -> Lexicon:
        """The paper counts as if `papers` were absent (leave-one-out evaluation). Sentence counts
        stay whole: the extractive weights were tuned with every sentence counted."""
        stem_df, word_df, alias_df = Counter(self.stems), Counter(self.words), Counter(self.aliases)
        n = self.papers
        for paper in papers:
            n -= 1
            stem_df.subtract(stems(paper.text))
            word_df.subtract(words_of(paper.text))
            alias_df.subtract(f"{short}={long}" for short, long in aliases_in(paper.text).items())
        return Lexicon(n, +stem_df, +word_df, self.sentences, self.sentence_stems, +alias_df)

    def paper_idf(self, smoothing: float) -> IDF:
        return IDF(self.stems, self.papers, smoothing=smoothing)

    def sentence_idf(self, smoothing: float, offset: float) -> IDF:
        return IDF(self.sentence_stems, self.sentences, smoothing=smoothing, offset=offset)

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(self.__dict__, ensure_ascii=False, separators=(",", ":")))

    @classmethod
    def load(cls, path: Path) -> Lexicon:
        return cls(**json.loads(path.read_text()))


_ALIAS = re.compile(r"((?:[\w-]+\s+){0,7}[\w-]+)\s+\(([A-Za-z][\w-]*[A-Z][\w-]*)s?\)")


def aliases_in(text: str) -> dict[str, str]:
    """The abbreviations a text defines, lowercased: {"rope": "rotary position embedding"}.
    The long form is the fewest words before "(ABBR)" whose initials (hyphen parts included)
    hold the abbreviation's capitals in order, starting with its first letter."""
    out: dict[str, str] = {}
    for match in _ALIAS.finditer(text):
        words, abbreviation = match.group(1).split(), match.group(2)
        capitals = [c.lower() for c in abbreviation if c.isupper()]
        for start in range(len(words) - 1, -1, -1):
            span = words[start:]
            initials = [part[0].lower() for word in span for part in word.split("-") if part]
            if initials and initials[0] == abbreviation[0].lower() and _subsequence(capitals, initials):
                out[re.sub(r"(?<=[A-Z])s$", "", abbreviation).lower()] = " ".join(span).lower()
                break
    return out


def _subsequence(wanted: list[str], letters: list[str]) -> bool:
    it = iter(letters)
    return all(letter in it for letter in wanted)


class NameFinder:
    """Which papers a text names, found by scanning the text once with an Aho-Corasick automaton
    of every paper's name (pyahocorasick), whatever the number of papers. Names match as
    `corpus.mentions` does: case-sensitive, whole words, fallback names ("Some words…") never;
    titles, where the corpus has them, whole words in any case ("the paper titled quiet tokens: ...")."""

    def __init__(self, papers: Iterable[Paper]):
        by_name: dict[str, list[str]] = {}
        by_title: dict[str, list[str]] = {}
        for paper in papers:
            if paper.named:
                by_name.setdefault(paper.name, []).append(paper.paper_id)
            if paper.title:
                by_title.setdefault(paper.title.lower(), []).append(paper.paper_id)
        self._names, self._titles = _automaton(by_name), _automaton(by_title)

    def named(self, text: str) -> Iterator[str]:
        """The ids of the papers whose name or title `text` mentions, each once, names first, each
        kind in the order they end in it."""
        seen: set[str] = set()
        for automaton, searched in ((self._names, text), (self._titles, text.lower())):
            if automaton is None:
                continue
            for end, (length, paper_ids) in automaton.iter(searched):
                start = end - length + 1
                if (start > 0 and _is_word(searched[start - 1])) or (
                    end + 1 < len(searched) and _is_word(searched[end + 1])
                ):
                    continue
                for pid in paper_ids:
                    if pid not in seen:
                        seen.add(pid)
                        yield pid


def _automaton(words: dict[str, list[str]]):
    """An Aho-Corasick automaton of `words` (word -> paper ids), or None for no words."""
    import ahocorasick

    if not words:
        return None
    automaton = ahocorasick.Automaton()
    for word, paper_ids in words.items():
        automaton.add_word(word, (len(word), paper_ids))
    automaton.make_automaton()
    return automaton


def _is_word(char: str) -> bool:
    """What the regular expression `\\w` matches (Python's definition)."""
    return char.isalnum() or char == "_"
