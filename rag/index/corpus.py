"""Corpus files -> papers: each file's records (rag/index/formats.py), duplicates merged by id.

A seed file is one header line (any language) then abstracts separated by blank lines; JSON
Lines, CSV, OpenReview and arXiv files bring titles, authors, links and ids too.
A paper's identity is the first 12 hex digits of sha256 over its whitespace-normalised text,
so the same abstract in two files is one paper listing both files in `sources`.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from pathlib import Path

from rag.common.errors import CorpusError
from rag.common.text import CJK
from rag.index.formats import SUFFIXES, Record, normalise, parse_file, supported

_URL = re.compile(r"https?://[^\s<>\"'`]+")
_URL_TRAILING_JUNK = ".,;:!?)]}*'\"`"


def paper_id_for(text: str) -> str:
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:12]


@dataclass
class Paper:
    """One abstract. `name` is what a text calls it (the method the abstract introduces), which
    questions and sentences are matched against; `display_name` is what a reader is shown."""

    paper_id: str
    text: str
    name: str  # the name the abstract gives, else its first words ending in "…" (`named` is False)
    code_url: str | None
    sources: list[str] = field(default_factory=list)
    title: str | None = None  # the corpus's title for it, where the corpus has titles
    authors: list[str] = field(default_factory=list)
    url: str | None = None
    ref: str | None = None  # the corpus's own id for it (an OpenReview or arXiv id), where it has one
    derived_title: str | None = None  # a short title derived from the abstract when indexing (rag/index/titles.py)
    llm_title: str | None = None  # an LLM's title, grounded in the abstract (RAG_TITLES=llm, rag/index/llm_titles.py)

    @property
    def named(self) -> bool:
        """True when the abstract gives the paper a name (else `name` is its first words)."""
        return not self.name.endswith("…")

    @property
    def display_name(self) -> str:
        """The title, else the abstract's name for it, else the LLM's title, else the derived one:
        never a cut sentence once the index has derived one."""
        if self.title:
            return self.title
        if self.named:
            return self.name
        return self.llm_title or self.derived_title or self.name

    def public(self) -> dict:
        """What a reader is shown (the HTTP contract): `name` is `display_name`; `title`,
        `authors` and `url` only where the corpus has them."""
        shown: dict[str, object] = {"paper_id": self.paper_id, "name": self.display_name, "text": self.text}
        shown |= {"code_url": self.code_url, "sources": list(self.sources)}
        extra = {"title": self.title, "authors": list(self.authors), "url": self.url, "ref": self.ref}
        return shown | {key: value for key, value in extra.items() if value}

    def to_dict(self) -> dict:
        """Every field, for a store to keep; `sources` copied."""
        record = {f.name: getattr(self, f.name) for f in fields(self)}
        record["sources"] = list(self.sources)
        record["authors"] = list(self.authors)
        return record


@dataclass
class Corpus:
    papers: list[Paper]
    paragraphs: int
    files: dict[str, str] = field(default_factory=dict)  # seed file name -> sha256, when read from files

    def __post_init__(self) -> None:
        self.by_id = {p.paper_id: p for p in self.papers}

    def __len__(self) -> int:
        return len(self.papers)

    def get(self, paper_id: str) -> Paper | None:
        return self.by_id.get(paper_id)

    @property
    def content_hash(self) -> str:
        """Hash of the set of abstracts: independent of file names and file order."""
        h = hashlib.sha256()
        for pid in sorted(self.by_id):
            h.update(pid.encode())
            h.update(self.by_id[pid].text.encode("utf-8"))
        return h.hexdigest()


def read_seed_bytes(path: Path, max_bytes: int | None = None) -> bytes:
    """A corpus file's bytes; a file over `max_bytes` is refused before it is read."""
    try:
        if max_bytes is not None and (size := path.stat().st_size) > max_bytes:
            raise CorpusError(
                f"{path}: {size / 2**20:.0f} MB, over the {max_bytes / 2**20:.0f} MB a corpus file may hold "
                "(RAG_MAX_FILE_MB): split it into several files"
            )
        return path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def read_seed_file(path: Path, max_bytes: int | None = None) -> list[Record]:
    """The records of one corpus file (any format in rag/index/formats.py), or CorpusError naming it."""
    return parse_file(read_seed_bytes(path, max_bytes), path)


def file_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def corpus_files(seeds_dir: Path) -> list[Path]:
    """The corpus files of a folder: every file in a known format, hidden ones (an add's pending file) aside."""
    return sorted(f for f in Path(seeds_dir).iterdir() if f.is_file() and supported(f))


def load_corpus(
    seeds_dir: Path, extra: dict[str, bytes] | None = None, max_bytes: int | None = None, min_words: int = 0
) -> Corpus:
    """Read every corpus file in `seeds_dir` (and the `extra` files, name -> bytes, about to join
    it) into a deduplicated corpus that records each file's sha256; a file over `max_bytes`, or
    with an abstract of fewer than `min_words` words, is refused."""
    seeds_dir = Path(seeds_dir)
    if not seeds_dir.is_dir():
        raise CorpusError(f"{seeds_dir}: not a directory")
    raws = {f.name: read_seed_bytes(f, max_bytes) for f in corpus_files(seeds_dir)} | (extra or {})
    if not raws:
        raise CorpusError(f"{seeds_dir}: no seed files ({', '.join('*' + s for s in SUFFIXES)}) found")
    parsed = {name: parse_file(raw, seeds_dir / name) for name, raw in raws.items()}
    for name, records in parsed.items():
        check_abstracts(records, name, min_words)
    corpus = build_corpus(parsed.items())
    corpus.files = {name: file_hash(raw) for name, raw in sorted(raws.items())}
    return corpus


def seed_files(seeds_dir: Path) -> dict[str, str]:
    """The seed folder's files and their sha256, without parsing them: a cheap staleness check."""
    return {f.name: file_hash(read_seed_bytes(f)) for f in corpus_files(seeds_dir)}


def build_corpus(files: Iterable[tuple[str, Iterable[Record | str]]]) -> Corpus:
    """Merge (source name, records) pairs into papers; the order of files does not matter. A
    record is an abstract with what its file knows of it; a bare string, an abstract alone. The
    same abstract twice is one paper, with what either record knows (the first that knows it wins)."""
    papers: dict[str, Paper] = {}
    paragraphs = 0
    for source, items in files:
        for item in items:
            record = item if isinstance(item, Record) else Record(item)
            paragraphs += 1
            pid = paper_id_for(record.text)
            paper = papers.get(pid)
            if paper is None:
                paper = papers[pid] = Paper(pid, record.text, extract_name(record.text), extract_code_url(record.text))
            if source not in paper.sources:
                paper.sources.append(source)
            paper.title = paper.title or record.title
            paper.authors = paper.authors or list(record.authors)
            paper.url = paper.url or record.url
            paper.ref = paper.ref or record.ref
    for paper in papers.values():
        paper.sources.sort()
    ordered = sorted(papers.values(), key=lambda p: (p.sources[0], p.paper_id))
    return Corpus(ordered, paragraphs)


_WORDS = re.compile(r"[^\W\d_]+")


def words_in(text: str) -> int:
    """Words of prose: runs of letters, and a word per two characters of Chinese, Japanese or Korean."""
    cjk = len(CJK.findall(text))
    return len(_WORDS.findall(CJK.sub(" ", text))) + cjk // 2


def check_abstracts(records: Iterable[Record], source: str, min_words: int) -> None:
    """Refuse what is not an abstract (a stray line, a title alone, a table's cell): text of fewer
    than `min_words` words of prose. CorpusError names the file and the record."""
    for n, item in enumerate(records, start=1):
        if (count := words_in(text := item.text)) < min_words:
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise CorpusError(
                f"{source}: abstract {n} ({shown!r}) has {count} word{'s' * (count != 1)}: not an abstract "
                f"(one has at least {min_words}, RAG_MIN_ABSTRACT_WORDS)"
            )


def mentions(text: str, name: str) -> bool:
    """True when `text` mentions a paper's real (not fallback) name as a whole word.

    Case-sensitive: names such as SPEED, TOP or GHOST are also ordinary words."""
    return not name.endswith("…") and re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def extract_code_url(text: str) -> str | None:
    match = _URL.search(text)
    if not match:
        return None
    url = match.group(0).rstrip(_URL_TRAILING_JUNK)
    return url or None


# Name extraction. No library names the method an abstract introduces, so this is hand-written:
# find the phrase after "we propose/introduce/present ..." and keep what looks like a name.
_INTRO = re.compile(
    r"\b(?:we|this work|this paper|and)\s+(?:\w+\s+){0,4}?"
    r"(?:propose|introduce|present|develop|derive|release|build|construct|design|introducing|proposing|presenting)s?\b"
    r"\s*(?:by\s+)?",
    re.IGNORECASE,
)
_LEADING_FILLER = re.compile(
    r"^(?:(?:the|a|an|our|novel|new|simple|general|lightweight|first|original|method|framework|"
    r"approach|model|--|-|—|–)\s+|[\-–—:]\s*)+",
    re.IGNORECASE,
)
_MARKUP = re.compile(
    r"^(?:\*\*(?P<b>[^*]+?)\*\*|\*(?P<i>[^*]+?)\*|\\textbf\{(?P<tb>[^}]+)\}|"
    r"\$?\\texttt\{(?P<tt>[^}]+)\}\$?)"
)
_NAME_TOKEN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9\-]*$")
_CONNECTORS = {"via", "of", "for", "and", "with", "in", "on", "to", "from"}
_ACRONYM_PAREN = re.compile(r"\(\s*(?:\*\*)?([A-Za-z][A-Za-z0-9\-]*[A-Z][A-Za-z0-9\-]*)(?:\*\*)?\s*\)")


def _is_acronym(token: str) -> bool:
    """A token like RoPE, MMM-PPI, dLLM-Cache, Ego3S: two capitals, or a capital and a digit."""
    if not _NAME_TOKEN.match(token) or re.search(r"-[a-z]+$", token):
        return False  # "GMM-type", "LLM-based" describe, they do not name
    caps = sum(c.isupper() for c in token)
    return caps >= 2 or (caps >= 1 and any(c.isdigit() for c in token))


def _coined(word: str) -> bool:
    """A word English does not write (wordfreq knows none of its parts), such as a method's name."""
    from wordfreq import zipf_frequency

    return zipf_frequency(word, "en") == 0


def _clean(name: str) -> str:
    name = re.sub(r"[*$`\\]|textbf|texttt|\{|\}", "", name)
    return normalise(name).strip(" ,.;:()")


def _capitalised_run(words: list[str]) -> list[str]:
    """Leading words that start with a capital (or are acronyms), allowing connectors inside."""
    run: list[str] = []
    for i, word in enumerate(words):
        bare = word.strip(",.;:")
        if bare and (bare[0].isupper() or _is_acronym(bare)) and _NAME_TOKEN.match(bare):
            run.append(bare)
            if bare != word:
                break
        elif word in _CONNECTORS and run and i + 1 < len(words) and words[i + 1][:1].isupper():
            run.append(word)
        else:
            break
    while run and run[-1] in _CONNECTORS:
        run.pop()
    return run


def _candidate(rest: str) -> tuple[int, str] | None:
    """(strength, name) for the phrase after an introducing verb; strength 2 = name-like."""
    rest = _LEADING_FILLER.sub("", rest)
    phrase = re.split(r"[,;.:]\s|(?:^|\s)(?:that|which|to|as)\s", rest, maxsplit=1)[0]
    markup = _MARKUP.match(rest)
    if markup:
        raw = next(g for g in markup.groups() if g)
        acronym = _ACRONYM_PAREN.search(raw)
        if acronym:
            return 2, acronym.group(1)
        name = _clean(raw)
        # "**learnable indexer**" stresses a description; a name holds a capital ("**Deep Forcing**").
        return (2, name) if any(w[:1].isupper() or _is_acronym(w) for w in name.split()) else None
    words = rest.split()
    run = _capitalised_run(words)
    if run:
        after = rest[len(" ".join(words[: len(run)])) :].lstrip()
        acronym = _ACRONYM_PAREN.match(after)
        if len(run) >= 2 and acronym:
            return 2, acronym.group(1)
        if len(run) == 1 and not _is_acronym(run[0]) and not words[0].endswith(","):
            # One capitalised word then a noun: a name only when the word is coined ("Euclean
            # kernels"); "Feynman diagrams" or "GMM-type estimators" describe what is used.
            if not _coined(run[0]):
                return None
            head = re.split(r"\s(?:of|for|on|in|under|through|with|via)\s", phrase, maxsplit=1)[0]
            return 2, " ".join(head.split()[:4])
        if len(run) == 1 or not acronym:
            return 2, " ".join(run[:5])
    acronym = _ACRONYM_PAREN.search(phrase)
    if acronym:
        return 2, acronym.group(1)
    head = re.split(r"\s(?:of|for|on|in|under|through|with|via)\s", phrase, maxsplit=1)[0]
    for word in head.split():
        word = word.strip("*")
        if _is_acronym(word) and not word.endswith("s"):
            return 2, word
    return None


def extract_name(text: str) -> str:
    """The method/model/dataset the abstract introduces, else its first words."""
    best: tuple[int, str] | None = None
    for match in _INTRO.finditer(text):
        found = _candidate(text[match.end() : match.end() + 400])  # a name follows its verb closely
        if found and found[1] and (best is None or found[0] > best[0]):
            best = found
            if found[0] == 2:
                break
    if best:
        return best[1]
    words = text.split()
    label = " ".join(words[:8])
    label = label.rstrip(",.;:") or label  # never empty: an empty name is "mentioned" everywhere
    return label + ("…" if len(words) > 8 else "")
