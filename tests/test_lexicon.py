"""The word counts and the name automaton that keep a question's cost independent of the
corpus size: the same results as reading every paper, without reading them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from rag.assistant import Assistant
from rag.index.chunking import split_sentences
from rag.index.corpus import Corpus, Paper, load_corpus, mentions
from rag.index.lexicon import Lexicon, NameFinder

from .conftest import SEEDS

PAPERS = load_corpus(SEEDS).papers
NAMES = sorted({p.name for p in PAPERS if not p.name.endswith("…")})
FINDER = NameFinder(PAPERS)
DEV = Path(__file__).resolve().parent.parent / "eval" / "data" / "dev.jsonl"


def read_by_scan(text: str) -> set[str]:
    """What the automaton replaces: every paper's name matched against the text."""
    return {p.paper_id for p in PAPERS if mentions(text, p.name)}


def test_names_in_the_dev_questions_are_found_as_a_scan_finds_them():
    questions = [json.loads(line)["question"] for line in DEV.read_text().splitlines() if line.strip()]
    named = 0
    for question in questions:
        found = set(FINDER.named(question))
        assert found == read_by_scan(question), question
        named += bool(found)
    assert named >= 20  # the dev split names papers often enough for this to test something


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from(NAMES),
    st.text(alphabet="aZ9_ -.(,é中", max_size=3),
    st.text(alphabet="aZ9_ -.),é中", max_size=3),
)
def test_a_name_is_found_only_as_a_whole_word(name, before, after):
    text = f"{before}{name}{after}"
    assert set(FINDER.named(text)) == read_by_scan(text)


def test_a_sentence_runs_on_past_an_abbreviation():
    paper = Paper("p", "We add a More vs. Fewer loss, e.g. for MRI. It ranks models.", "P", None)
    assert [s.text for s in split_sentences(paper)] == [
        "We add a More vs. Fewer loss, e.g. for MRI.",
        "It ranks models.",
    ]


def test_lexicon_without_papers_is_the_count_of_the_rest():
    sentences = [s.text for p in PAPERS for s in split_sentences(p)]
    whole = Lexicon.count(PAPERS, sentences)
    rest = Lexicon.count(PAPERS[5:], sentences)
    assert whole.without(PAPERS[:5]) == rest
    assert whole.stems != rest.stems and rest.papers == len(PAPERS) - 5


class CountedPaper(Paper):
    """A paper that counts the reads of its text and its name (`read` holds the paper ids)."""

    read: set[str] = set()

    def __getattribute__(self, attribute):
        if attribute in ("text", "name"):
            CountedPaper.read.add(object.__getattribute__(self, "paper_id"))
        return object.__getattribute__(self, attribute)


def test_a_question_at_20000_papers_reads_a_bounded_number_of_them(loaded_index, settings):
    """20,000 more papers in the table (words and names of their own, never retrieved by the
    vector or BM25 indexes): a question reads no more papers than it retrieves and names."""
    extra = [
        CountedPaper(f"x{i:05d}", f"We propose Synth{i}, a method for topic{i} and task{i % 97}.", f"Synth{i}", None)
        for i in range(20_000)
    ]
    corpus = Corpus(loaded_index.corpus.papers + extra, loaded_index.corpus.paragraphs + len(extra))
    sentences = [s.text for p in loaded_index.corpus.papers for s in split_sentences(p)]
    big = dataclasses.replace(loaded_index, corpus=corpus, lexicon=Lexicon.count(corpus.papers, sentences))
    assistant = Assistant(big, settings)
    questions = {
        "What does Synth123 do for topic123?": {"x00123"},  # the paper it names, and no other
        "Which papers study task5?": set(),  # a word 206 of them contain
        "Which paper prunes the state dimension of Mamba2?": set(),
        "Is there work on image watermarks?": set(),
    }
    for question, expected in questions.items():
        CountedPaper.read.clear()
        answer = assistant.ask(question)
        assert CountedPaper.read == expected and answer.text, question
