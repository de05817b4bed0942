"""The LLM generator: any OpenAI-compatible endpoint answers from the numbered sources, in
JSON sentences each naming its source where the endpoint can constrain its output, else in
free text with [n] markers."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from rag.answer import prompts
from rag.common.errors import GeneratorError, GeneratorTimeout
from rag.common.settings import Settings
from rag.query.analysis import Ask
from rag.retrieve.retrieval import Hit

_SHINGLE = 6


def _words(text: str) -> list[str]:
    return re.findall(r"\w+", text.lower())


@lru_cache(maxsize=4)
def _shingles(system: str) -> frozenset[tuple[str, ...]]:
    prompt = _words(system)
    return frozenset(tuple(prompt[i : i + _SHINGLE]) for i in range(len(prompt) - _SHINGLE + 1))


def repeats_instructions(text: str, system: str) -> bool:
    """True when `text` quotes six words in a row of the system prompt: a prompt-injected or
    confused model echoing its rules. Checked on every piece, so at most five leak."""
    words, shingles = _words(text), _shingles(system)
    return any(tuple(words[i : i + _SHINGLE]) in shingles for i in range(len(words) - _SHINGLE + 1))


def excerpt(hit: Hit, keep: int) -> str:
    """The `keep` sentences of a paper's abstract closest to the question, in the abstract's order
    (the whole abstract when `keep` is 0 or it has no more): a small model reads less, and what it
    reads is what answers."""
    scores = hit.sentence_scores
    if not keep or len(scores) <= keep:
        return hit.paper.text
    best = set(sorted(scores, key=lambda sentence: scores[sentence], reverse=True)[:keep])
    return " ".join(sentence for sentence in scores if sentence in best)


def format_sources(sources: list[Hit], keep: int = 0) -> str:
    return "\n\n".join(
        prompts.SOURCE.format(n=n, name=hit.paper.display_name.replace('"', "'"), text=excerpt(hit, keep))
        for n, hit in enumerate(sources, start=1)
    )


# One sentence of at most 300 characters: a stop (. ! ? 。！？) ends the text unless a digit follows
# ("3.8x"); no quote, backslash, bracket, brace, angle bracket or line break inside. Decoding
# constrained to it closes the text at its first sentence end: a model cannot run two sentences into
# one "text" (the citation checker would judge only the last against its source), write a "[n]" of
# its own inside it, or drift into markup or JSON of its own.
ONE_SENTENCE = r'^([^.!?。！？"\\\[\]{}<>\n\r\t]|[.!?][0-9]){1,300}[.!?。！？]$'


def answer_schema(sources: int) -> dict:
    """The reply an endpoint that constrains decoding must produce: whether the sources cover the
    question, then one to four sentences, each the number (1..sources) of the source it comes
    from, then the sentence itself (ignored when not covered: an empty list would let small
    models say nothing). The number comes first: a model that has picked its source writes the
    sentence from it."""
    sentence = {
        "type": "object",
        "additionalProperties": False,
        "required": ["source", "text"],
        "properties": {
            "source": {"type": "integer", "enum": list(range(1, sources + 1))},
            "text": {"type": "string", "pattern": ONE_SENTENCE},
        },
    }
    return {
        "type": "object",
        "additionalProperties": False,
        "required": ["covered", "sentences"],
        "properties": {
            "covered": {"type": "boolean"},
            "sentences": {"type": "array", "items": sentence, "minItems": 1, "maxItems": 4},
        },
    }


QUERY_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["query"],
    "properties": {"query": {"type": "string"}},
}

# How to ask for a schema: OpenAI and vLLM take `json_schema`; llama-cpp-python's server rejects
# that and takes `json_object` with a `schema`, which it turns into a grammar.
RESPONSE_FORMATS = {
    "json_schema": lambda schema: {
        "type": "json_schema",
        "json_schema": {"name": "reply", "schema": schema, "strict": True},
    },
    "json_object": lambda schema: {"type": "json_object", "schema": schema},
}
# Endpoint -> the response format it accepted (None: it refused them all, free text it is).
_ACCEPTED_FORMAT: dict[str, str | None] = {}

# Complete pieces of a streamed JSON answer, in the schema's key order. No JSON library parses
# a document as it arrives, so this is hand-written: a sentence is shown once its object closes.
_COVERED = re.compile(r'"covered"\s*:\s*(true|false)')
_SENTENCE = re.compile(r'\{\s*"source"\s*:\s*(\d+)\s*,\s*"text"\s*:\s*"((?:[^"\\]|\\.)*)"\s*\}')


class _Refused(Exception):
    """The endpoint refused a structured-output request before answering."""


def _with_marker(text: str, n: int) -> str:
    """ "A finding." + 1 -> "A finding [1]. " (the marker before the closing stop, as the citation
    checker expects it)."""
    text = text.strip()
    stop = text[-1] if text and text[-1] in ".!?。！？" else ""
    return f"{text[: len(text) - len(stop)].rstrip()} [{n}]{stop or '.'} "


class LLMGenerator:
    """Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp's server).

    Answers come as JSON (sentences with their source numbers, decoding constrained to
    `answer_schema`) when the endpoint accepts a response format, else as free text with [n]
    markers; either way they reach the caller as text with markers, which the citation checks
    judge."""

    name = "llm"
    verbatim = False

    def __init__(self, settings: Settings, client=None):
        """`client`: an `openai.OpenAI` (made from the settings when None) or anything with its
        `chat.completions.create` (tests script the replies)."""
        from openai import OpenAI

        self.settings = settings
        self.client = client or OpenAI(
            base_url=settings.llm.base_url,
            api_key=settings.llm.api_key or "not-needed",
            timeout=settings.llm.timeout,
            max_retries=settings.llm.max_retries,
        )

    def _errors(self, exc: Exception) -> GeneratorError:
        import openai

        where = self.settings.llm.base_url or "the OpenAI API"
        # openai wraps its HTTP library's errors, or lets them through when a stream stalls or
        # breaks; that library is httpx or its fork httpx2 depending on the version, so the
        # transport errors are recognised by class name.
        cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
        kinds = {kind.__name__ for kind in type(cause).__mro__}
        if isinstance(exc, openai.APITimeoutError) or "TimeoutException" in kinds:
            return GeneratorTimeout(
                f"the language model at {where} did not answer within {self.settings.llm.timeout:g} s"
            )
        if kinds & {"RemoteProtocolError", "ReadError"}:
            return GeneratorError(f"the connection to the language model at {where} broke mid-answer")
        if isinstance(exc, openai.APIConnectionError) or "TransportError" in kinds:
            return GeneratorError(f"cannot reach the language model at {where}")
        if isinstance(exc, openai.APIStatusError):
            return GeneratorError(f"the language model at {where} answered HTTP {exc.status_code}")
        return GeneratorError(f"the language model at {where} sent an unusable reply ({type(exc).__name__})")

    def chat(self, system: str, user: str, max_tokens: int, response_format: dict | None = None) -> Iterator[str]:
        """Stream the reply's text; every failure becomes a GeneratorError (`_Refused` when the
        endpoint rejects `response_format` before answering)."""
        import openai

        produced = ""
        extra: dict[str, Any] = {"response_format": response_format} if response_format else {}
        try:
            # `with` closes the connection when the caller stops early (a client that left).
            with self.client.chat.completions.create(
                model=self.settings.llm.model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
                **extra,
            ) as stream:
                for chunk in stream:
                    piece = (chunk.choices[0].delta.content or "") if chunk.choices else ""
                    if not piece:
                        continue
                    produced += piece
                    if repeats_instructions(produced[-len(piece) - 200 :], system):
                        where = self.settings.llm.base_url or "the OpenAI API"
                        raise GeneratorError(
                            f"the language model at {where} repeated its instructions instead of answering"
                        )
                    yield piece
        except GeneratorError:
            raise
        except openai.APIStatusError as exc:
            # A refusal of the format itself: 400/422, or llama.cpp's 500 naming response_format.
            refused = exc.status_code in (400, 422) or (exc.status_code >= 500 and "response_format" in str(exc))
            if response_format and not produced and refused:
                raise _Refused() from exc
            raise self._errors(exc) from exc
        except Exception as exc:  # the openai client raises many types; each becomes one message
            raise self._errors(exc) from exc
        if not produced:
            where = self.settings.llm.base_url or "the OpenAI API"
            raise GeneratorError(f"the language model at {where} returned an empty or unreadable answer")

    @property
    def _endpoint(self) -> str:
        return self.settings.llm.base_url or "the OpenAI API"

    def _formats(self) -> list[str]:
        """The response formats to try, in order: the one this endpoint accepted before, or all."""
        if self._endpoint in _ACCEPTED_FORMAT:
            known = _ACCEPTED_FORMAT[self._endpoint]
            return [known] if known else []
        return list(RESPONSE_FORMATS)

    def _structured(self, system: str, user: str, max_tokens: int, schema: dict) -> Iterator[str] | None:
        """The reply as a JSON text stream in the first response format the endpoint accepts
        (remembered), or None when it accepts none (text mode then, unless RAG_LLM_OUTPUT=json)."""
        if self.settings.llm.output == "text":
            return None
        for kind in self._formats():
            stream = self.chat(system, user, max_tokens, RESPONSE_FORMATS[kind](schema))
            try:
                first = next(stream)
            except _Refused:
                continue
            except StopIteration:
                first = ""
            _ACCEPTED_FORMAT[self._endpoint] = kind
            return itertools.chain([first], stream)
        if self.settings.llm.output == "json":
            raise GeneratorError(
                f"the language model at {self._endpoint} accepts no structured output "
                f"(RAG_LLM_OUTPUT=json); set RAG_LLM_OUTPUT=auto or text"
            )
        _ACCEPTED_FORMAT[self._endpoint] = None
        return None

    def stream(self, ask: Ask, sources: list[Hit]) -> Iterator[str]:
        """The answer to the question as asked, exclusions included (a follow-up: its standalone
        rewrite), shaped by its intent."""
        question = ask.searched.text if ask.rewritten else ask.whole
        intent = "summary of one paper" if ask.intent == "summary" and ask.one_paper else ask.intent
        guide = prompts.ANSWER_GUIDE.format(intent=intent, shape=prompts.INTENT_SHAPES[intent])
        user = prompts.ANSWER_USER.format(
            sources=format_sources(sources, self.settings.llm.source_sentences), question=question, guide=guide
        )
        reply = self._structured(
            prompts.ANSWER_SYSTEM_JSON, user, self.settings.llm.max_tokens, answer_schema(len(sources))
        )
        if reply is None:
            yield from self.chat(prompts.ANSWER_SYSTEM, user, self.settings.llm.max_tokens)
            return
        buffer, shown, covered = "", 0, None
        for piece in reply:
            buffer += piece
            if covered is None and (found := _COVERED.search(buffer)):
                covered = found.group(1) == "true"
                if not covered:
                    yield prompts.NOT_COVERED_REPLY
                    return
            for sentence in _SENTENCE.finditer(buffer, shown):
                shown = sentence.end()
                text = json.loads(f'"{sentence.group(2)}"', strict=False)
                if text.strip():
                    yield _with_marker(text, int(sentence.group(1)))

    def condense(self, question: str, history: list[dict]) -> str | None:
        lines = "\n".join(f"{turn['role']}: {turn['content']}" for turn in history[-6:])
        user = prompts.CONDENSE_USER.format(history=lines, question=question)
        reply = self._structured(prompts.CONDENSE_SYSTEM_JSON, user, 96, QUERY_SCHEMA)
        if reply is not None:
            try:
                query = json.loads("".join(reply)).get("query", "")
            except ValueError:
                query = ""
            if isinstance(query, str) and query.strip():
                return query.strip()
        return "".join(self.chat(prompts.CONDENSE_SYSTEM, user, 64)).strip().strip('"')
