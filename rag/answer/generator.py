"""Numbered sources -> answer text with [n] markers, as a stream of text pieces.

Two generators behind one small interface (`name`, `stream(question, sources, ask)`, where
`ask` is the question's analysis, rag/query/analysis.py, that shapes the answer):
`LLMGenerator` (rag/answer/llm.py) calls any OpenAI-compatible endpoint; `ExtractiveGenerator`
(rag/answer/extractive.py) needs no model and answers from the retrieved abstracts' own sentences in
milliseconds. `make_generator` picks one from the settings.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from rag.answer.extractive import ExtractiveGenerator
from rag.answer.llm import LLMGenerator
from rag.common.settings import Settings
from rag.index.lexicon import Lexicon
from rag.query.analysis import Ask
from rag.retrieve.retrieval import Hit


class Generator(Protocol):
    """What the assistant asks of a generator, and all it asks."""

    name: str
    # Answers in the sources' own sentences, each cited: it cannot fail to cite, and it stands in
    # for a generator that does (the fallback).
    verbatim: bool

    def stream(self, ask: Ask, sources: list[Hit]) -> Iterator[str]:
        """The answer to `ask` from the numbered `sources`, with [n] markers, a piece at a time."""
        ...

    def condense(self, question: str, history: list[dict]) -> str | None:
        """A follow-up rewritten into a standalone query; None when this generator cannot rewrite
        one. Raises GeneratorError when it fails."""
        ...


def uses_llm(settings: Settings) -> bool:
    """`auto` means the LLM only when an endpoint is set."""
    return settings.answering.generator == "llm" or (
        settings.answering.generator == "auto" and bool(settings.llm.base_url)
    )


def make_generator(settings: Settings, lexicon: Lexicon | None = None) -> Generator:
    """The generator the settings ask for (uses_llm). `lexicon` (the index's word counts) serves
    the extractive generator's word weights."""
    if uses_llm(settings):
        return LLMGenerator(settings)
    return ExtractiveGenerator(lexicon, settings.answering.extractive)
