from dataclasses import dataclass

import pytest

from rag.answer.citations import CitationTracker, clean_answer, parse_marker
from rag.index.corpus import Paper


@dataclass
class FakeHit:  # plain data standing in for a retrieved paper's hit; no behaviour is faked
    paper: Paper


SOURCES = [FakeHit(Paper(f"p{i}", f"text {i}", f"Paper {i}", None)) for i in range(1, 6)]


def support(sentence, hit):
    return (0.0 if "unsupported" in sentence else 1.0), f"snippet of {hit.paper.paper_id}"


def clean(text):
    return clean_answer(text, SOURCES, support, 0.5)


@pytest.mark.parametrize(
    "body, numbers",
    [("1", [1]), ("1, 3", [1, 3]), ("2-4", [2, 3, 4]), ("1;2", [1, 2]), ("1 and 2", [1, 2]), ("5-2", [])],
)
def test_marker_bodies(body, numbers):
    assert parse_marker(body) == numbers


def test_markers_are_renumbered_in_order_of_first_use():
    text, citations, dropped = clean("A holds [3]. B holds [1, 3]. C holds [1][2].")
    assert text == "A holds [1]. B holds [2][1]. C holds [2][3]."
    assert [(c.n, c.paper_id) for c in citations] == [(1, "p3"), (2, "p1"), (3, "p2")]
    assert dropped == []


def test_out_of_range_markers_are_dropped():
    text, citations, dropped = clean("A holds [9]. B holds [0] and [2].")
    assert text == "A holds. B holds and [1]."
    assert [c.paper_id for c in citations] == ["p2"]
    assert dropped == [9, 0]


def test_repeated_and_adjacent_markers_collapse():
    text, citations, _ = clean("A holds [2][2] [2]. B [2,2].")
    assert text == "A holds [1]. B [1]."
    assert len(citations) == 1


def test_malformed_markers_are_left_as_text_but_never_cite():
    text, citations, _ = clean("See [a] and [1 and] and [] and [[4]].")
    assert [c.paper_id for c in citations] == ["p4"]
    assert text == "See [a] and [1 and] and [] and [[1]]."


def test_unsupported_citations_are_removed():
    text, citations, dropped = clean("This is unsupported [4]. This is fine [5].")
    assert text == "This is unsupported. This is fine [1]."
    assert [c.paper_id for c in citations] == ["p5"] and dropped == [4]


def test_only_cited_sources_are_returned_with_their_snippets():
    _, citations, _ = clean("Only one [2].")
    assert [c.to_dict() for c in citations] == [
        {"n": 1, "paper_id": "p2", "name": "Paper 2", "text": "text 2", "snippet": "snippet of p2", "code_url": None}
    ]


def test_streamed_pieces_give_the_same_text_and_never_leak_a_raw_marker():
    raw = "Jacobi Forcing gets 3.5x speedup [4]. It also [9] works [1][2]. Done."
    pieces = ["Jacobi ", "Forcing gets 3.", "5x speed", "up [", "4]. It ", "also [9", "] works [1", "][2]. Do", "ne."]
    tracker = CitationTracker(SOURCES, support, 0.5)
    shown = [tracker.feed(p) for p in pieces] + [tracker.finish()]
    assert "".join(shown) == clean(raw)[0] == "Jacobi Forcing gets 3.5x speedup [1]. It also works [2][3]. Done."
    assert all("[9" not in s and "[4" not in s for s in shown)


def test_a_streamed_sentence_is_checked_whole_not_from_its_last_words():
    seen = []

    def recording_support(sentence, hit):
        seen.append(sentence)
        return support(sentence, hit)

    tracker = CitationTracker(SOURCES, recording_support, 0.5)
    pieces = ["This ", "claim ", "is ", "unsupported ", "by ", "anything ", "[2]. ", "Fine ", "here ", "[1]."]
    shown = "".join(tracker.feed(p) for p in pieces) + tracker.finish()
    assert seen == ["This claim is unsupported by anything.", "Fine here."]
    assert shown == "This claim is unsupported by anything. Fine here [1]."
    assert [c.paper_id for c in tracker.citations] == ["p1"] and tracker.dropped == [2]
