"""Property tests (Hypothesis) for the two parsers: seed files -> papers, and citation markers.

Seed files: a header line, then abstracts separated by blank lines, in any line-ending style,
with any Unicode (control characters, exotic whitespace, BOM). Whatever the bytes, parsing
gives abstracts or a CorpusError; each paragraph becomes one paper (same normalised text, one
paper, every source listed), with an id that is a pure function of that text.

Citations: an answer fed to CitationTracker in any cut gives the text, citations and dropped
numbers it gives in one piece; only checked markers, numbered 1..n by first use, reach the user;
the words around the markers are kept.

Budget: RAG_PROPERTY_EXAMPLES examples per property (default 150). More on demand:
    RAG_PROPERTY_EXAMPLES=2000 .venv/bin/python -m pytest tests/test_properties.py -q
No example database is written (database=None). Each property notes its input, so a failure
shows it even though schemathesis' pytest plugin blanks Hypothesis' own report of the arguments
(`-p no:schemathesis` brings that back); print_blob adds a @reproduce_failure line.
"""

from __future__ import annotations

import hashlib
import os
import random
import re
import tempfile
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, note, settings
from hypothesis import strategies as st

from rag.answer.citations import MARKER, CitationTracker, clean_answer, lexical_support, parse_marker
from rag.common.errors import CorpusError
from rag.index.corpus import (
    build_corpus,
    extract_name,
    load_corpus,
    normalise,
    paper_id_for,
    read_seed_file,
)
from rag.index.formats import parse_seed
from rag.index.stores.base import SentenceRows
from rag.retrieve.retrieval import Hit

EXAMPLES = int(os.environ.get("RAG_PROPERTY_EXAMPLES", "150"))
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FEW = settings(PROPERTY, max_examples=max(10, EXAMPLES // 10))  # properties that touch the disk

# -- seed files -----------------------------------------------------------------------------------

WHITESPACE = [chr(c) for c in range(0x3001) if chr(c).isspace()]  # every one is below U+3001
IN_LINE_SPACE = [c for c in WHITESPACE if c not in "\r\n"]  # \t \x0b \x0c \x1c-\x1f \x85 \xa0 \u2028 ...
ODD = ["\ufeff", "\x01", "\x1b", "\x7f", "\u200b", "\u0301", "\U0001f600", "论文", "\U0010ffff", "é", "**", "[1]"]
LINE_PIECE = st.one_of(
    st.sampled_from(IN_LINE_SPACE + ODD),
    st.characters(exclude_characters="\r\n\x00", exclude_categories=("Cs",)),
)


def strings(pieces, min_size: int = 0, max_size: int = 30):
    return st.lists(pieces, min_size=min_size, max_size=max_size).map("".join)


LINE = strings(LINE_PIECE, 1).filter(str.strip)  # not a blank line
HEADER = LINE.filter(lambda h: h.lstrip("\ufeff").strip())  # U+FEFF opening a file is a BOM, not a title
PARAGRAPH = st.lists(LINE, min_size=1, max_size=4)  # the lines of one abstract
BLANK = st.text(st.sampled_from(IN_LINE_SPACE), max_size=3)  # a blank line: whitespace only
EOL = st.sampled_from(["\n", "\r\n", "\r"])
PARAGRAPHS = st.lists(PARAGRAPH, min_size=1, max_size=8)


@st.composite
def seed_bytes(draw, paragraphs=PARAGRAPHS):
    """(file bytes, the abstracts it must give): random header, line endings, blank lines, BOM."""
    paras = draw(paragraphs)
    eol = draw(EOL)

    def blank_lines(least: int) -> str:
        return "".join(draw(BLANK) + eol for _ in range(draw(st.integers(least, 3))))

    text = blank_lines(0) + draw(HEADER) + eol + blank_lines(0)
    text += (eol + blank_lines(1)).join(eol.join(lines) for lines in paras)
    text += draw(st.sampled_from(["", eol])) + blank_lines(0)
    bom = draw(st.sampled_from([b"", b"\xef\xbb\xbf"]))
    return bom + text.encode("utf-8"), [normalise(" ".join(lines)) for lines in paras]


def seed_file_of(abstracts: list[str], eol: str = "\n") -> bytes:
    return eol.join(["Papers", "", *(f"{a}{eol}" for a in abstracts)]).encode("utf-8")


def sha_id(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]


@PROPERTY
@given(seed_bytes())
def test_every_paragraph_becomes_one_abstract(seed):
    raw, expected = seed
    note(f"raw={raw!r}")
    assert parse_seed(raw, "a.txt") == expected
    assert parse_seed(raw, "a.txt") == expected  # nothing hidden carried from one parse to the next


@PROPERTY
@given(seed_bytes(), EOL)
def test_reparsing_the_abstracts_gives_them_back(seed, eol):
    note(f"raw={seed[0]!r}")
    abstracts = parse_seed(seed[0], "a.txt")
    assert parse_seed(seed_file_of(abstracts, eol), "b.txt") == abstracts


@PROPERTY
@given(
    st.one_of(
        st.binary(max_size=300),
        strings(st.one_of(st.sampled_from(WHITESPACE + ODD + ["\x00", "\n\n"]), st.characters()), 0, 300).map(
            lambda s: s.encode("utf-8", "surrogatepass")
        ),
    )
)
def test_any_bytes_give_abstracts_or_a_corpus_error(raw):
    note(f"raw={raw!r}")
    try:
        abstracts = parse_seed(raw, "odd.txt")
    except CorpusError as err:
        assert "odd.txt" in str(err)
        return
    assert abstracts and all(a and a == normalise(a) for a in abstracts)
    assert b"\x00" not in raw
    corpus = build_corpus([("odd.txt", abstracts)])
    assert corpus.paragraphs == len(abstracts) and {p.text for p in corpus.papers} == set(abstracts)


@PROPERTY
@given(seed_bytes(), st.data())
def test_a_nul_byte_or_broken_utf8_is_a_corpus_error(seed, data):
    raw = seed[0]
    at = data.draw(st.integers(0, len(raw)))
    bad = data.draw(st.sampled_from([b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80"]))  # NUL, stray, cut, surrogate
    note(f"raw={raw[:at] + bad + raw[at:]!r}")
    with pytest.raises(CorpusError, match="bad.txt"):  # never valid UTF-8, wherever it goes
        parse_seed(raw[:at] + bad + raw[at:], "bad.txt")


@st.composite
def seed_folders(draw):
    """Files drawing their paragraphs from a shared pool, so abstracts repeat within and across files."""
    pool = draw(st.lists(PARAGRAPH, min_size=1, max_size=6))
    files = []
    for i in range(draw(st.integers(1, 4))):
        chosen = st.lists(st.sampled_from(pool), min_size=1, max_size=6)
        files.append((f"seed_{i}.txt", draw(seed_bytes(chosen))))
    return files


@PROPERTY
@given(seed_folders(), st.randoms(use_true_random=False))
def test_each_distinct_abstract_is_one_paper_listing_every_file_it_is_in(files, rnd):
    note(f"files={files!r}")
    parsed = [(name, parse_seed(raw, name)) for name, (raw, _) in files]
    corpus = build_corpus(parsed)
    in_files: dict[str, set[str]] = {}
    for name, (_, expected) in files:
        for text in expected:
            in_files.setdefault(text, set()).add(name)
    assert corpus.paragraphs == sum(len(expected) for _, (_, expected) in files)
    assert sorted(p.text for p in corpus.papers) == sorted(in_files)  # none lost, merged or doubled
    assert len({p.paper_id for p in corpus.papers}) == len(corpus.papers)
    for paper in corpus.papers:
        assert paper.paper_id == sha_id(paper.text) == paper_id_for(paper.text)
        assert paper.sources == sorted(in_files[paper.text])
        assert corpus.get(paper.paper_id) is paper
        assert paper.name and paper.name == extract_name(paper.text)

    rnd.shuffle(parsed)
    again = build_corpus(parsed)
    assert [p.to_dict() for p in again.papers] == [p.to_dict() for p in corpus.papers]
    assert again.content_hash == corpus.content_hash


@PROPERTY
@given(PARAGRAPH, st.lists(PARAGRAPH, max_size=3), st.lists(PARAGRAPH, max_size=3), st.data())
def test_an_abstract_in_two_files_is_one_paper_with_two_sources(shared, before, after, data):
    rewrapped = [" ".join(shared)]  # the same abstract, on one line in the second file
    one, _ = data.draw(seed_bytes(st.just([*before, shared])))
    two, _ = data.draw(seed_bytes(st.just([rewrapped, *after])))
    note(f"a.txt={one!r} b.txt={two!r}")
    corpus = build_corpus([("b.txt", parse_seed(two, "b.txt")), ("a.txt", parse_seed(one, "a.txt"))])
    paper = corpus.get(paper_id_for("\n".join(shared)))
    assert paper is not None and paper.text == normalise(" ".join(shared))
    assert paper.sources == ["a.txt", "b.txt"]
    assert sum(p.text == paper.text for p in corpus.papers) == 1


@FEW
@given(seed_folders())
def test_loading_a_folder_equals_parsing_its_files(files):
    note(f"files={files!r}")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, (raw, _) in files:
            (folder / name).write_bytes(raw)
        corpus = load_corpus(folder)
        assert [[r.text for r in read_seed_file(folder / name)] for name, _ in files] == [
            expected for _, (_, expected) in files
        ]
    parsed = build_corpus([(name, parse_seed(raw, name)) for name, (raw, _) in files])
    assert [p.to_dict() for p in corpus.papers] == [p.to_dict() for p in parsed.papers]


SPACING = st.lists(st.sampled_from(WHITESPACE), min_size=1, max_size=3).map("".join)


@PROPERTY
@given(st.lists(strings(LINE_PIECE, 1, 20).filter(str.strip), min_size=1, max_size=5), st.data())
def test_paper_ids_depend_on_the_normalised_text_only(words, data):
    text = " ".join(words)
    respaced = data.draw(SPACING) + "".join(w + data.draw(SPACING) for w in words)
    note(f"text={text!r} respaced={respaced!r}")
    assert paper_id_for(text) == paper_id_for(respaced) == sha_id(normalise(text))
    assert re.fullmatch(r"[0-9a-f]{12}", paper_id_for(text))


@PROPERTY
@given(st.lists(strings(LINE_PIECE, 1, 40).filter(str.strip), min_size=2, max_size=30, unique_by=normalise))
def test_distinct_texts_get_distinct_ids(texts):
    note(f"texts={texts!r}")
    assert len({paper_id_for(t) for t in texts}) == len(texts)


def test_ids_are_stable_across_runs_and_machines():
    assert paper_id_for("Attention is all you need.") == "cc2c11f181ff"
    assert paper_id_for(" Attention\tis all\r\nyou\u3000need. ") == "cc2c11f181ff"


@PROPERTY
@given(
    strings(
        st.one_of(
            st.sampled_from(
                [
                    "we propose ",
                    "We introduce ",
                    "**",
                    "*",
                    "(",
                    ")",
                    ", ",
                    ". ",
                    "-- ",
                    "\\textbf{",
                    "}",
                    "$",
                    "Foo",
                    "BAR",
                    "via ",
                    "of ",
                ]
            ),
            LINE_PIECE,
        ),
        1,
        60,
    )
    .map(normalise)
    .filter(bool)
)
@example("We propose **,** here.")
@example("we introduce *$* for graphs.")
@example(". , ;")
def test_every_abstract_gets_a_non_empty_name(text):
    note(f"text={text!r}")  # Hypothesis' own report shows blank arguments under schemathesis' plugin
    # An empty name would count as "mentioned" in every question (corpus.mentions).
    assert extract_name(text)


def test_huge_paragraphs_and_many_blank_lines_parse_quickly():
    rnd = random.Random(7)
    vocabulary = ["diffusion", "graphs", "RoPE", "we", "propose", "the", "and", "論文", "(HAMC)", "**X**", "é\u0301"]
    random_words = " ".join(rnd.choice(vocabulary) for _ in range(150_000))[:1_000_000]
    repeated_intro = "and we propose the method of graphs, " * 28_000  # ~1 MB of "we propose" phrases
    one_long_word = "x" * 1_000_000
    paragraphs = [random_words, repeated_intro, one_long_word]
    raw = ("Header\r\n" + ("\r\n" + " \t\r\n" * 50_000).join(paragraphs)).encode("utf-8")
    started = time.perf_counter()
    abstracts = parse_seed(raw, "huge.txt")
    corpus = build_corpus([("huge.txt", abstracts)])
    elapsed = time.perf_counter() - started
    assert abstracts == [normalise(p) for p in paragraphs]
    assert len(corpus) == 3 and all(p.name for p in corpus.papers)
    assert elapsed < 30, f"{elapsed:.1f} s for 3 MB"  # linear: ~1 s; name extraction was quadratic (minutes)


# -- citations ----------------------------------------------------------------------------------

ABSTRACTS = [
    "Spiral RoPE rotates positions along spirals so attention handles long context windows.",
    "Jacobi Forcing decodes many tokens in parallel and gets a 3.5x speedup over causal decoding.",
    "MedScope reads medical images and clinical reports with one vision language model.",
    "AgentNoiseBench measures how robust tool-using agents are to noisy tool outputs.",
    "PolyFlow learns polynomial flows for fast generative sampling of molecules.",
]
PAPERS = {p.text: p for p in build_corpus([("sources.txt", ABSTRACTS)]).papers}
SOURCES = [
    Hit(PAPERS[text], rank, 0.0, 0.0, text, {}, SentenceRows([text], np.zeros((1, 4)), None))
    for rank, text in enumerate(ABSTRACTS, start=1)
]
THRESHOLD = 0.5


def grounding(sentence: str, hit: Hit) -> tuple[float, str]:
    """The lexical part of Assistant.grounding: share of the sentence's words found in the abstract."""
    return lexical_support(sentence, hit.paper.text), hit.paper.text


VOCABULARY = sorted({w.strip(".,") for text in ABSTRACTS for w in text.split()}) + [
    "banana",
    "quantum",
    "unsupported",
    "3.5",
    "2026",
    "e.g.",
    "Fig.",
    "论文",
    "模型",
]
NUMBER = st.integers(0, 12).map(str) | st.sampled_from(["1000", "007", "٣", "5-2", "2-4", "1-999", "3 - 4"])


@st.composite
def markers(draw):
    numbers = draw(st.lists(NUMBER, min_size=1, max_size=3))
    inside = draw(st.sampled_from(["", " ", "\n"]))
    body = draw(st.sampled_from([", ", ",", ";", " and ", "; "])).join(numbers)
    return f"[{inside}{body}{inside}]"


TOKEN = st.one_of(
    st.sampled_from(VOCABULARY),
    st.sampled_from([" ", " ", " ", "  ", "\t", "\n", "\n\n", "\r\n", "\u2028", "\u3000", "\xa0", "\x0b", "\x00"]),
    st.sampled_from([".", ". ", ",", ";", ":", "!", "?", "。", "！", "(", ")", "[", "]", "-", "–", "**"]),
    markers(),
    st.sampled_from(["[a]", "[]", "[1 and]", "(0, 5]", "5]", "[1", "[12", "[1,", "][", "[[4]]"]),
    st.text(max_size=4),
)
ANSWER = st.lists(TOKEN, max_size=60).map("".join)


def run(pieces: list[str]) -> tuple[str, list[dict], list[int]]:
    tracker = CitationTracker(SOURCES, grounding, THRESHOLD)
    shown = "".join(tracker.feed(p) for p in pieces) + tracker.finish()
    return shown, [c.to_dict() for c in tracker.citations], tracker.dropped


def cut(text: str, positions: list[int]) -> list[str]:
    bounds = [0, *sorted(positions), len(text)]
    return [text[a:b] for a, b in pairwise(bounds)]


def numbers_in(text: str) -> list[int]:
    return [n for m in MARKER.finditer(text) for n in parse_marker(m.group(1))]


def bare(text: str) -> str:
    """The text without whitespace, and without markers (also those that removing others closes)."""
    text = "".join(text.split())
    while MARKER.search(text):
        text = MARKER.sub("", text)
    return text


@PROPERTY
@given(ANSWER, st.data())
@example("A holds [1].  B holds [9] here.", None)
@example("Results , as shown [2] hold [9].", None)
def test_streaming_in_any_cut_gives_what_one_piece_gives(text, data):
    whole = run([text])
    positions = [] if data is None else data.draw(st.lists(st.integers(0, len(text)), max_size=12))
    note(f"pieces={cut(text, positions)!r}")
    assert run(cut(text, positions)) == whole
    assert run(list(text)) == whole  # one character at a time
    cleaned, citations, dropped = clean_answer(text, SOURCES, grounding, THRESHOLD)
    assert (cleaned, [c.to_dict() for c in citations], dropped) == (whole[0].strip(), *whole[1:])


@PROPERTY
@given(ANSWER)
@example("A [1[9]] B [5 [9]] C [1 an[0]d 2].")
def test_only_checked_markers_numbered_by_first_use_reach_the_user(text):
    note(f"text={text!r}")
    shown, citations, dropped = run([text])
    assert [c["n"] for c in citations] == list(range(1, len(citations) + 1))
    used = numbers_in(shown)
    assert all(1 <= n <= len(citations) for n in used)
    assert list(dict.fromkeys(used)) == list(range(1, len(citations) + 1))  # first use order, all used
    cited = {SOURCES[n - 1].paper.paper_id for n in numbers_in(text) if 1 <= n <= len(SOURCES)}
    assert {c["paper_id"] for c in citations} <= cited
    assert len({c["paper_id"] for c in citations}) == len(citations)
    out_of_range = Counter(n for n in numbers_in(text) if not 1 <= n <= len(SOURCES))
    assert Counter(n for n in dropped if not 1 <= n <= len(SOURCES)) == out_of_range


@PROPERTY
@given(ANSWER)
@example("See (0, 5] [2] and x [1].")
def test_the_words_around_markers_are_kept(text):
    note(f"text={text!r}")
    shown, _, dropped = run([text])
    assert bare(shown) == bare(text)
    if not MARKER.search(text):
        assert shown == text
    elif not dropped and all(parse_marker(m.group(1)) for m in MARKER.finditer(text)):
        # Nothing dropped: exactly the markers changed, whitespace included.
        joined = re.compile(rf"{MARKER.pattern}(?:\s*{MARKER.pattern})*")
        assert MARKER.sub("", shown) == joined.sub("", text)


@PROPERTY
@given(
    st.lists(st.sampled_from(VOCABULARY), max_size=8).map(" ".join),
    st.lists(st.sampled_from(VOCABULARY), max_size=8).map(" ".join),
    st.sampled_from(["[9]", "[0]", "[6, 12]"]),
)
def test_a_marker_pointing_to_no_source_is_dropped(before, after, marker):
    shown, citations, dropped = clean_answer(f"{before} {marker} {after}.", SOURCES, grounding, THRESHOLD)
    assert not MARKER.search(shown) and citations == []
    assert dropped == numbers_in(marker)
    assert shown.split() == f"{before} {after}.".split() or shown == f"{before}{after}.".strip()


def test_a_huge_answer_is_cleaned_in_linear_time():
    rnd = random.Random(11)
    sentence = "Jacobi Forcing decodes tokens in parallel [2]. Spiral RoPE rotates positions [1, 9]. "
    many_sentences = sentence * 12_000  # ~1 MB, 24 000 sentences
    words = [w for w in VOCABULARY if "." not in w] + ["[3]", "[7]", "[1][2]"]
    one_sentence = " ".join(rnd.choice(words) for _ in range(150_000)) + "."
    noise = "".join(rnd.choice("ab [1]2,.!?。\n\x00\u2028é") for _ in range(1_000_000))
    for text in (many_sentences, one_sentence, noise):
        started = time.perf_counter()
        whole = run([text])
        streamed = run(cut(text, list(range(0, len(text), 65_536))))
        elapsed = time.perf_counter() - started
        assert streamed == whole
        assert all(1 <= n <= len(whole[1]) for n in numbers_in(whole[0]))
        assert elapsed < 30, f"{elapsed:.1f} s for {len(text)} characters"  # linear: ~1 s; was minutes
