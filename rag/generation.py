"""Numbered sources -> answer text with [n] markers, as a stream of text pieces.

Two generators behind one small interface (`name`, `stream(question, sources)`):
`LLMGenerator` calls any OpenAI-compatible endpoint; `ExtractiveGenerator` needs no model and
answers from the retrieved abstracts' own sentences in milliseconds. `make_generator` picks one
from the settings.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from functools import lru_cache
from typing import Protocol

from . import prompts
from .citations import MARKER, content_words
from .config import Settings
from .corpus import mentions
from .embedding import is_cjk
from .errors import GeneratorError, GeneratorTimeout
from .retrieval import Hit


class Generator(Protocol):
    name: str

    def stream(self, question: str, sources: list[Hit]) -> Iterator[str]: ...


# -- extractive -----------------------------------------------------------------------------

_WHICH = re.compile(r"\b(which|what)\s+(paper|papers|method|methods|model|models|framework|approach|benchmark|dataset|system)\b|\bname\b", re.I)
_HOW_MUCH = re.compile(r"\bhow (much|many|fast|large|big|long|often)\b|\b(speed-?up|percent|accuracy|improvement|reduc\w*|gain|number|size|rate|by what)\b", re.I)
_NUMBER = re.compile(r"\d")
_CONTRIBUTION = re.compile(r"\bwe (propose|introduce|present|develop|show|find|demonstrate)\b", re.I)
_CODE_QUESTION = re.compile(r"\b(code|github|repo|repository|implementation|source)\b", re.I)
_BOILERPLATE = re.compile(r"https?://|\bcode (is|and)\b|\bavailable at\b|\bpublicly available\b", re.I)
_LEAD_IN = re.compile(
    r"^(?:(?:to (?:address|tackle|overcome|bridge|close|mitigate|solve)[^,]{0,60}|in this (?:work|paper)|here|"
    r"specifically|moreover|furthermore|additionally|finally|however|therefore|thus|in particular|"
    r"based on (?:this|these)[^,]{0,40}|building on[^,]{0,60}|motivated by[^,]{0,60}|leveraging[^,]{0,60}|"
    r"crucially|empirically|theoretically|consequently|to this end|as a result|instead),\s*)+",
    re.I,
)


def counts(question_words: set[str], sentence: str) -> bool:
    """A number right before a word of the question: "18 challenging datasets" for "how many datasets"."""
    for match in re.finditer(r"\d[\d,.]*\s+((?:[^\W\d]+\s+){0,2}[^\W\d]+)", sentence):
        if stems(set(match.group(1).lower().split())) & stems(question_words):
            return True
    return False


def stems(words: set[str]) -> set[str]:
    """Five-letter prefixes: a crude stemmer that matches "constructed" with "construct"."""
    return {w[:5] for w in words}


def third_person(sentence: str) -> str:
    """Drop a connective opening and say "the authors" for "we", so a sentence reads as an answer."""
    text = _LEAD_IN.sub("", sentence.replace("**", "")).strip()
    text = re.sub(r"\bwe\b", "the authors", text)
    text = re.sub(r"\bWe\b", "The authors", text)
    text = re.sub(r"\bour\b", "their", text)
    text = re.sub(r"\bOur\b", "Their", text)
    text = re.sub(r"\bus\b", "them", text)
    return text[:1].upper() + text[1:]


class ExtractiveGenerator:
    """Picks the 1-4 sentences of the retrieved abstracts that best answer the question.

    Sentence scores are the cosine with the question (computed at retrieval), plus question
    words the sentence shares, plus a bonus for numbers when the question asks "how much".
    Hand-written because no library answers extractively with citations per sentence.
    """

    name = "extractive"
    max_sentences = 4
    margin = 0.12  # sentences within this score of the best one join the answer

    def __init__(self, sentences: list[str] = ()):
        """`sentences`: the corpus's sentences, to weight question words by rarity (IDF), so that
        "GRPO" or "RMSE" in a question counts for more than "method"."""
        frequency: dict[str, int] = {}
        for sentence in sentences:
            for stem in stems(content_words(sentence)):
                frequency[stem] = frequency.get(stem, 0) + 1
        self.idf = {stem: math.log((len(sentences) + 1) / (df + 1)) + 1 for stem, df in frequency.items()}
        self.unseen_idf = math.log(len(sentences) + 1) + 1

    def overlap(self, question_stems: set[str], sentence: str) -> float:
        """IDF-weighted share of the question's words that the sentence contains."""
        if not question_stems:
            return 0.0
        weight = lambda stem: self.idf.get(stem, self.unseen_idf)  # noqa: E731
        shared = question_stems & stems(content_words(sentence))
        return sum(map(weight, shared)) / sum(map(weight, question_stems))

    def select(self, question: str, sources: list[Hit], multilingual: bool = False) -> list[tuple[int, str, float]]:
        # multilingual-e5 cosines are squeezed into a narrow band: scale the margins with it.
        spread = 0.25 if multilingual else 1.0
        wants_number = bool(_HOW_MUCH.search(question))
        wants_code = bool(_CODE_QUESTION.search(question))
        top_dense = max((h.dense_score for h in sources), default=0.0)
        # A question that names a paper ("What speedup does Jacobi Forcing report?") is about it.
        named = {n for n, hit in enumerate(sources, start=1) if mentions(question, hit.paper.name)}
        candidates = []
        for n, hit in enumerate(sources, start=1):
            if named and n not in named:
                continue
            if n > 1 and not named and hit.dense_score < top_dense - 0.05 * spread:
                continue  # a paper far weaker than the best one does not answer
            # Words naming the paper pick the paper, not the sentence that answers.
            words = content_words(question) - content_words(hit.paper.name)
            question_stems = stems(words)
            for position, (sentence, cosine) in enumerate(hit.sentence_scores.items()):
                overlap = self.overlap(question_stems, sentence)
                # A sentence of a less relevant paper needs a better sentence score to lead.
                score = cosine + 0.5 * (hit.dense_score - top_dense) + spread * 0.6 * overlap
                if position == 0:
                    score -= 0.05 * spread  # an abstract opens with background, not its finding
                if _CONTRIBUTION.search(sentence) or hit.paper.name in sentence:
                    score += 0.04 * spread
                if wants_number and _NUMBER.search(sentence):
                    score += spread * (0.4 if counts(words, sentence) else 0.15)
                if _BOILERPLATE.search(sentence):
                    # "Code is available at ..." answers a question about code and nothing else.
                    score += 0.3 if wants_code else -0.3
                candidates.append((score, n, sentence))
        candidates.sort(key=lambda c: -c[0])
        if not candidates:
            return []
        if _WHICH.search(question):
            # "Which paper ...?" is answered by the best-ranked paper: its best sentence leads.
            top = min(c[1] for c in candidates)
            lead = next(c for c in candidates if c[1] == top)
            candidates.remove(lead)
            candidates.insert(0, (candidates[0][0] if candidates else lead[0], lead[1], lead[2]))
        best = candidates[0][0]
        chosen: list[tuple[int, str, float]] = []
        per_paper: dict[int, int] = {}
        for score, n, sentence in candidates:
            if len(chosen) == self.max_sentences or score < best - self.margin * spread:
                break
            if per_paper.get(n, 0) == 2:
                continue
            per_paper[n] = per_paper.get(n, 0) + 1
            chosen.append((n, sentence, score))
        return chosen

    def compose(self, question: str, sources: list[Hit]) -> str:
        chosen = self.select(question, sources, multilingual=is_cjk(question))
        parts = []
        for i, (n, sentence, _) in enumerate(chosen):
            # A bracketed number inside an abstract ("as in [7]") is not ours to cite.
            text = " ".join(MARKER.sub(" ", third_person(sentence)).split())
            end = text[-1] if text and text[-1] in ".!?" else "."
            text = text.rstrip(".!?")
            name = sources[n - 1].paper.name
            if i == 0 and _WHICH.search(question) and not name.endswith("…") and name not in text:
                text = f"{name}: {text}"
            parts.append(f"{text} [{n}]{end}")
        return " ".join(parts)

    def stream(self, question: str, sources: list[Hit]) -> Iterator[str]:
        text = self.compose(question, sources)
        for word in re.findall(r"\S+\s*", text):
            yield word


# -- LLM ------------------------------------------------------------------------------------


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


def format_sources(sources: list[Hit]) -> str:
    return "\n\n".join(
        prompts.SOURCE.format(n=n, name=hit.paper.name.replace('"', "'"), text=hit.paper.text)
        for n, hit in enumerate(sources, start=1)
    )


class LLMGenerator:
    """Any OpenAI-compatible chat endpoint (OpenAI, vLLM, Ollama, llama.cpp's server)."""

    name = "llm"

    def __init__(self, settings: Settings):
        from openai import OpenAI

        self.settings = settings
        self.client = OpenAI(
            base_url=settings.llm_base_url,
            api_key=settings.llm_api_key or "not-needed",
            timeout=settings.llm_timeout,
            max_retries=settings.llm_max_retries,
        )

    def _errors(self, exc: Exception) -> GeneratorError:
        import openai

        where = self.settings.llm_base_url or "the OpenAI API"
        # openai wraps its HTTP library's errors, or lets them through when a stream stalls or
        # breaks; that library is httpx or its fork httpx2 depending on the version, so the
        # transport errors are recognised by class name.
        cause = exc.__cause__ if isinstance(exc, openai.APIConnectionError) and exc.__cause__ else exc
        kinds = {kind.__name__ for kind in type(cause).__mro__}
        if isinstance(exc, openai.APITimeoutError) or "TimeoutException" in kinds:
            return GeneratorTimeout(f"the language model at {where} did not answer within {self.settings.llm_timeout:g} s")
        if kinds & {"RemoteProtocolError", "ReadError"}:
            return GeneratorError(f"the connection to the language model at {where} broke mid-answer")
        if isinstance(exc, openai.APIConnectionError) or "TransportError" in kinds:
            return GeneratorError(f"cannot reach the language model at {where}")
        if isinstance(exc, openai.APIStatusError):
            return GeneratorError(f"the language model at {where} answered HTTP {exc.status_code}")
        return GeneratorError(f"the language model at {where} sent an unusable reply ({type(exc).__name__})")

    def chat(self, system: str, user: str, max_tokens: int) -> Iterator[str]:
        """Stream the reply's text; every failure becomes a GeneratorError."""
        produced = ""
        try:
            # `with` closes the connection when the caller stops early (a client that left).
            with self.client.chat.completions.create(
                model=self.settings.llm_model,
                messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
                max_tokens=max_tokens,
                temperature=0,
                stream=True,
            ) as stream:
                for chunk in stream:
                    piece = (chunk.choices[0].delta.content or "") if chunk.choices else ""
                    if not piece:
                        continue
                    produced += piece
                    if repeats_instructions(produced[-len(piece) - 200 :], system):
                        where = self.settings.llm_base_url or "the OpenAI API"
                        raise GeneratorError(f"the language model at {where} repeated its instructions instead of answering")
                    yield piece
        except GeneratorError:
            raise
        except Exception as exc:  # the openai client raises many types; each becomes one message
            raise self._errors(exc) from exc
        if not produced:
            where = self.settings.llm_base_url or "the OpenAI API"
            raise GeneratorError(f"the language model at {where} returned an empty or unreadable answer")

    def stream(self, question: str, sources: list[Hit]) -> Iterator[str]:
        user = prompts.ANSWER_USER.format(sources=format_sources(sources), question=question)
        yield from self.chat(prompts.ANSWER_SYSTEM, user, self.settings.llm_max_tokens)

    def condense(self, question: str, history: list[dict]) -> str:
        lines = "\n".join(f"{turn['role']}: {turn['content']}" for turn in history[-6:])
        user = prompts.CONDENSE_USER.format(history=lines, question=question)
        return "".join(self.chat(prompts.CONDENSE_SYSTEM, user, 64)).strip().strip('"')


def make_generator(settings: Settings, sentences: list[str]) -> Generator:
    """The generator the settings ask for; `auto` means the LLM only when an endpoint is set.
    `sentences` (the corpus's) serve the extractive generator's word weights."""
    if settings.generator == "llm" or (settings.generator == "auto" and settings.llm_base_url):
        return LLMGenerator(settings)
    return ExtractiveGenerator(sentences)
