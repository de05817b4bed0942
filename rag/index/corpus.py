"""Seed files -> papers: header dropped, paragraphs split on blank lines, duplicates merged by id.

A seed file is one header line (any language) then abstracts separated by blank lines.
A paper's identity is the first 12 hex digits of sha256 over its whitespace-normalised text,
so the same abstract in two files is one paper listing both files in `sources`.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

from rag.common.errors import CorpusError

_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")  # a line of whitespace only, any (no-break space, U+3000...)
_URL = re.compile(r"https?://[^\s<>\"'`]+")
_URL_TRAILING_JUNK = ".,;:!?)]}*'\"`"


def normalise(text: str) -> str:
    """Collapse every run of whitespace to one space."""
    return " ".join(text.split())


def paper_id_for(text: str) -> str:
    return hashlib.sha256(normalise(text).encode("utf-8")).hexdigest()[:12]


@dataclass
class Paper:
    paper_id: str
    text: str
    name: str
    code_url: str | None
    sources: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "paper_id": self.paper_id,
            "name": self.name,
            "text": self.text,
            "code_url": self.code_url,
            "sources": list(self.sources),
        }


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


def read_seed_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as exc:
        raise CorpusError(f"{path}: cannot read ({exc.strerror or exc})") from exc


def read_seed_file(path: Path) -> list[str]:
    """Return the normalised abstracts of one seed file, or raise CorpusError naming it."""
    return parse_seed(read_seed_bytes(path), path)


def file_hash(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


def parse_seed(raw: bytes, path: Path | str) -> list[str]:
    """The abstracts of seed-format bytes; errors name `path`."""
    if not raw.strip():
        raise CorpusError(f"{path}: the file is empty")
    if b"\x00" in raw:
        raise CorpusError(f"{path}: looks like a binary file, not UTF-8 text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path}: not valid UTF-8 (byte {exc.start})") from exc
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    header, _, body = text.lstrip().partition("\n")  # blank lines before the header are skipped
    if not header.strip() or len(normalise(header)) > 200:
        raise CorpusError(
            f"{path}: no header line (expected a short title line, then abstracts separated by blank lines)"
        )
    if not body.strip():
        raise CorpusError(f"{path}: a header line but no abstracts")
    return [normalise(p) for p in _BLANK_LINE.split(body) if p.strip()]


def load_corpus(seeds_dir: Path, extra: dict[str, bytes] | None = None) -> Corpus:
    """Read every `*.txt` in `seeds_dir` (and the `extra` files, name -> bytes, about to join
    it) into a deduplicated corpus that records each file's sha256."""
    seeds_dir = Path(seeds_dir)
    if not seeds_dir.is_dir():
        raise CorpusError(f"{seeds_dir}: not a directory")
    raws = {f.name: read_seed_bytes(f) for f in sorted(seeds_dir.glob("*.txt"))} | (extra or {})
    if not raws:
        raise CorpusError(f"{seeds_dir}: no seed files (*.txt) found")
    corpus = build_corpus((name, parse_seed(raw, seeds_dir / name)) for name, raw in raws.items())
    corpus.files = {name: file_hash(raw) for name, raw in sorted(raws.items())}
    return corpus


def seed_files(seeds_dir: Path) -> dict[str, str]:
    """The seed folder's files and their sha256, without parsing them: a cheap staleness check."""
    return {f.name: file_hash(read_seed_bytes(f)) for f in sorted(Path(seeds_dir).glob("*.txt"))}


def build_corpus(files) -> Corpus:
    """Merge (source name, abstracts) pairs into papers; the order of files does not matter."""
    papers: dict[str, Paper] = {}
    paragraphs = 0
    for source, abstracts in files:
        for text in abstracts:
            paragraphs += 1
            pid = paper_id_for(text)
            paper = papers.get(pid)
            if paper is None:
                papers[pid] = Paper(pid, text, extract_name(text), extract_code_url(text), [source])
            elif source not in paper.sources:
                paper.sources.append(source)
    for paper in papers.values():
        paper.sources.sort()
    ordered = sorted(papers.values(), key=lambda p: (p.sources[0], p.paper_id))
    return Corpus(ordered, paragraphs)


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
        strong = any(w[:1].isupper() or _is_acronym(w) for w in name.split())
        return (2 if strong else 1), name
    words = rest.split()
    run = _capitalised_run(words)
    if run:
        after = rest[len(" ".join(words[: len(run)])) :].lstrip()
        acronym = _ACRONYM_PAREN.match(after)
        if len(run) >= 2 and acronym:
            return 2, acronym.group(1)
        if len(run) == 1 and not _is_acronym(run[0]) and not words[0].endswith(","):
            # "Feynman diagrams for ...": a capitalised modifier, keep its noun phrase.
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
