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
    name: str

    def stream(self, question: str, sources: list[Hit], ask: Ask | None = None) -> Iterator[str]: ...


def uses_llm(settings: Settings) -> bool:
    """`auto` means the LLM only when an endpoint is set."""
    return settings.generator == "llm" or (settings.generator == "auto" and bool(settings.llm_base_url))


def make_generator(settings: Settings, lexicon: Lexicon | None = None) -> Generator:
    """The generator the settings ask for (uses_llm). `lexicon` (the index's word counts) serves
    the extractive generator's word weights."""
    if uses_llm(settings):
        return LLMGenerator(settings)
    return ExtractiveGenerator(lexicon, settings.extractive)
