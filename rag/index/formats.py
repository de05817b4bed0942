"""Corpus files -> records (an abstract, with its title, authors, link and id where the file has them).

Formats, told by the file's suffix:
- seed (`.txt`): one header line, then abstracts separated by blank lines; nothing else known;
- JSON Lines (`.jsonl`, `.ndjson`) and CSV (`.csv`): one paper a row with `abstract` and any of
  `title`, `authors` (a JSON list, or names separated by ";"), `url`, `id`; any other column is
  refused, so that a misspelt one ("abstarct") is not silently dropped;
- OpenReview's notes export (`.json`, a list of notes or `{"notes": [...]}`; API v1's plain
  content fields and v2's `{"value": ...}` alike), and arXiv's metadata records (its JSON
  snapshot, a record a line in `.jsonl` or a list in `.json`, told by `authors_parsed` or
  `categories`; or the arXiv API's Atom feed, `.xml`).
Every error names the file and the row; nothing is read from a file that has one.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rag.common.errors import CorpusError

SUFFIXES = (".txt", ".jsonl", ".ndjson", ".json", ".csv", ".xml")
COLUMNS = ("abstract", "title", "authors", "url", "id")
_BLANK_LINE = re.compile(r"\n[^\S\n]*\n")  # a line of whitespace only, any (no-break space, U+3000...)
_ATOM = "{http://www.w3.org/2005/Atom}"


@dataclass(frozen=True)
class Record:
    text: str  # the abstract, whitespace-normalised
    title: str | None = None
    authors: list[str] = field(default_factory=list)
    url: str | None = None
    ref: str | None = None  # the file's own id for the paper


def normalise(text: str) -> str:
    """Collapse every run of whitespace to one space."""
    return " ".join(text.split())


def supported(path: Path | str) -> bool:
    name = Path(path).name
    return not name.startswith(".") and Path(name).suffix.lower() in SUFFIXES


def parse_file(raw: bytes, path: Path | str, suffix: str | None = None) -> list[Record]:
    """The records of one corpus file, by its suffix (or `suffix`); errors name `path` and the row."""
    suffix = (suffix or Path(path).suffix).lower()
    if suffix not in SUFFIXES:
        raise CorpusError(f"{path}: unknown format {suffix or '(no suffix)'} (known: {', '.join(SUFFIXES)})")
    text = _decoded(raw, path)
    if suffix == ".txt":
        return [Record(abstract) for abstract in _seed_abstracts(text, path)]
    if suffix == ".csv":
        return _csv(text, path)
    if suffix == ".xml":
        return _atom(raw, path)
    if suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise CorpusError(f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})") from exc
        rows = data.get("notes") if isinstance(data, dict) and "notes" in data else data
        rows = rows if isinstance(rows, list) else [rows]
        return [_row(row, path, f"record {n}") for n, row in enumerate(rows, start=1)]
    records = []
    for n, line in enumerate(text.split("\n"), start=1):
        if line.strip():
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise CorpusError(f"{path}: line {n}: not valid JSON ({exc.msg})") from exc
            records.append(_row(row, path, f"line {n}"))
    if not records:
        raise CorpusError(f"{path}: no records")
    return records


def parse_seed(raw: bytes, path: Path | str) -> list[str]:
    """The abstracts of seed-format bytes; errors name `path`."""
    return _seed_abstracts(_decoded(raw, path), path)


def _decoded(raw: bytes, path: Path | str) -> str:
    if not raw.strip():
        raise CorpusError(f"{path}: the file is empty")
    if b"\x00" in raw:
        raise CorpusError(f"{path}: looks like a binary file, not UTF-8 text")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{path}: not valid UTF-8 (byte {exc.start})") from exc
    return text.replace("\r\n", "\n").replace("\r", "\n")


def _seed_abstracts(text: str, path: Path | str) -> list[str]:
    header, _, body = text.lstrip().partition("\n")  # blank lines before the header are skipped
    if not header.strip() or len(normalise(header)) > 200:
        raise CorpusError(
            f"{path}: no header line (expected a short title line, then abstracts separated by blank lines)"
        )
    if not body.strip():
        raise CorpusError(f"{path}: a header line but no abstracts")
    return [normalise(p) for p in _BLANK_LINE.split(body) if p.strip()]


def _row(row: Any, path: Path | str, where: str) -> Record:
    """One JSON record: an OpenReview note, an arXiv metadata record, or a row of known columns."""
    if not isinstance(row, dict):
        raise CorpusError(f"{path}: {where}: expected an object, got {type(row).__name__}")
    if isinstance(row.get("content"), dict):
        return _openreview(row, path, where)
    if "authors_parsed" in row or "categories" in row:
        return _arxiv(row, path, where)
    return _known_columns(row, path, where)


def _known_columns(row: dict, path: Path | str, where: str) -> Record:
    keys = {str(k).strip().lower(): v for k, v in row.items()}
    unknown = sorted(k for k in keys if k not in COLUMNS)
    if unknown:
        raise CorpusError(f"{path}: {where}: unknown column {unknown[0]!r} (known: {', '.join(COLUMNS)})")
    return _record(
        keys.get("abstract"), keys.get("title"), keys.get("authors"), keys.get("url"), keys.get("id"), path, where
    )


def _openreview(note: dict, path: Path | str, where: str) -> Record:
    content = note["content"]

    def value(key: str) -> Any:
        item = content.get(key)
        return item.get("value") if isinstance(item, dict) else item  # API v2 wraps every field

    forum = note.get("forum") or note.get("id")
    url = f"https://openreview.net/forum?id={forum}" if forum else None
    return _record(value("abstract"), value("title"), value("authors"), url, note.get("id"), path, where)


def _arxiv(row: dict, path: Path | str, where: str) -> Record:
    parsed = row.get("authors_parsed")
    if isinstance(parsed, list) and all(isinstance(a, list) and a for a in parsed):
        authors: Any = [" ".join(p for p in [*a[1:2], a[0]] if p) for a in parsed]
    else:
        names = re.split(r",\s*(?:and\s+)?|\s+and\s+", str(row.get("authors") or ""))
        authors = [a.strip() for a in names if a.strip()]
    ref = row.get("id")
    url = f"https://arxiv.org/abs/{ref}" if ref else None
    return _record(row.get("abstract"), row.get("title"), authors, url, ref, path, where)


def _csv(text: str, path: Path | str) -> list[Record]:
    try:
        rows = list(csv.reader(io.StringIO(text)))
    except csv.Error as exc:
        raise CorpusError(f"{path}: not valid CSV ({exc})") from exc
    if not rows:
        raise CorpusError(f"{path}: no header row")
    header = [h.strip().lower() for h in rows[0]]
    unknown = [h for h in header if h not in COLUMNS]
    if unknown:
        raise CorpusError(f"{path}: unknown column {unknown[0]!r} (known: {', '.join(COLUMNS)})")
    if "abstract" not in header:
        raise CorpusError(f"{path}: no abstract column (columns: {', '.join(header)})")
    records = []
    for n, cells in enumerate(rows[1:], start=2):
        if not any(c.strip() for c in cells):
            continue
        if len(cells) != len(header):
            raise CorpusError(f"{path}: row {n}: {len(cells)} fields where the header has {len(header)}")
        row = dict(zip(header, cells, strict=True))
        records.append(
            _record(
                row.get("abstract"),
                row.get("title"),
                row.get("authors"),
                row.get("url"),
                row.get("id"),
                path,
                f"row {n}",
            )
        )
    if not records:
        raise CorpusError(f"{path}: a header row but no papers")
    return records


def _atom(raw: bytes, path: Path | str) -> list[Record]:
    """The arXiv API's Atom feed: each <entry>'s <summary>, <title>, <author><name> and <id>."""
    from defusedxml import ElementTree
    from defusedxml.common import DefusedXmlException

    try:
        root = ElementTree.fromstring(raw)
    except (ElementTree.ParseError, DefusedXmlException) as exc:
        raise CorpusError(f"{path}: not a valid Atom feed ({exc})") from exc
    entries = root.findall(f"{_ATOM}entry")
    if not entries:
        raise CorpusError(f"{path}: an XML file with no Atom <entry> (expected the arXiv API's feed)")
    records = []
    for n, entry in enumerate(entries, start=1):
        link = entry.findtext(f"{_ATOM}id")
        ref = link.rsplit("/abs/", 1)[-1] if link and "/abs/" in link else link
        authors = [a.findtext(f"{_ATOM}name") or "" for a in entry.findall(f"{_ATOM}author")]
        records.append(
            _record(
                entry.findtext(f"{_ATOM}summary"),
                entry.findtext(f"{_ATOM}title"),
                authors,
                link,
                ref,
                path,
                f"entry {n}",
            )
        )
    return records


def _record(abstract: Any, title: Any, authors: Any, url: Any, ref: Any, path: Path | str, where: str) -> Record:
    if not isinstance(abstract, str) or not abstract.strip():
        raise CorpusError(f"{path}: {where}: no abstract")
    for label, value in (("title", title), ("url", url)):
        if value is not None and not isinstance(value, str):
            raise CorpusError(f"{path}: {where}: {label} must be text, got {type(value).__name__}")
    if isinstance(authors, str):
        authors = [a for a in authors.split(";")]
    if authors is not None and not (isinstance(authors, list) and all(isinstance(a, str) for a in authors)):
        raise CorpusError(f"{path}: {where}: authors must be a list of names or names separated by ';'")
    return Record(
        normalise(abstract),
        normalise(title) or None if title else None,
        [normalise(a) for a in authors or [] if a.strip()],
        normalise(url) or None if url else None,
        normalise(str(ref)) or None if ref not in (None, "") else None,
    )
