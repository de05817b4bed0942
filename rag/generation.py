"""Numbered sources -> answer text with [n] markers, as a stream of text pieces.

Two generators behind one small interface (`name`, `stream(question, sources)`):
`LLMGenerator` calls any OpenAI-compatible endpoint; `ExtractiveGenerator` needs no model and
answers from the retrieved abstracts' own sentences in milliseconds. `make_generator` picks one
from the settings.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Protocol

from . import prompts
from .citations import MARKER
from .config import ExtractiveWeights, Settings
from .corpus import mentions
from .errors import GeneratorError, GeneratorTimeout
from .retrieval import Hit
from .text import IDF, is_cjk, stems


class Generator(Protocol):
    name: str

    def stream(self, question: str, sources: list[Hit]) -> Iterator[str]: ...


# -- extractive -----------------------------------------------------------------------------

_WHICH = re.compile(
    r"\b(which|what)\s+(paper|method|model|framework|approach|benchmark|dataset|system)\b|\bname\b", re.I
)
# "Which papers...?", "Are there other works on...?", 哪些论文: every paper that answers is cited.
# Not the verbs ("which paper studies X", "why it works") nor 哪些 of other things (哪些任务: tasks).
_SEVERAL = re.compile(
    r"\bpapers\b|\b(?:which|what|any|other|several|there)\s+(?:(?!paper\b|method\b|model\b)\w+\s+){0,2}?(?:works|studies)\b"
    r"|哪些[^，。？?]{0,6}?(?:论文|文章|工作|研究)",
    re.I,
)
_HOW_MUCH = re.compile(
    r"\bhow (much|many|fast|large|big|long|often)\b"
    r"|\b(speed-?up|percent|accuracy|improvement|reduc\w*|gain|number|size|rate|by what)\b",
    re.I,
)
_NUMBER = re.compile(r"\d")
# "On which environments is X evaluated?", "Which benchmarks was it tested on?": the sentence that
# reports the experiments ("Experiments on MiniGrid and Craftax ...", "evaluated on 18 datasets").
_WHERE_TESTED = re.compile(
    r"\b(which|what)\s+(\w+\s+){0,2}?(datasets?|benchmarks?|environments?|tasks?|domains?|settings?|games?)\b"
    r"|\b(evaluated|tested|validated|benchmarked|experiments?)\s+(on|in|with)\b",
    re.I,
)
_EXPERIMENTS = re.compile(
    r"\b(experiments?|evaluat\w*|tested|validat\w*|benchmarks?|results)\b[^.;]{0,40}?\b(on|in|across)\b", re.I
)
# "What is X?", "What does X do?", "What does X stand for?": answered by the sentence introducing X.
_DEFINITION = re.compile(
    r"^\W*what\s+(is|are)\s+[^,;?]{1,60}\?\W*$|\bstand for\b|^\W*what\s+does\s+[^,;?]{1,60}\s+do\W*$", re.I
)
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


def asks_for_several(question: str) -> bool:
    return bool(_SEVERAL.search(question))


def counts(question_stems: set[str], sentence: str) -> bool:
    """A number right before a word of the question: "18 challenging datasets" for "how many datasets"."""
    for match in re.finditer(r"\d[\d,.]*\s+((?:[^\W\d]+\s+){0,2}[^\W\d]+)", sentence):
        if stems(match.group(1)) & question_stems:
            return True
    return False


def introduces(sentence: str, name: str) -> bool:
    """The sentence that presents a paper's method: "we propose X", "X, a ...", "X is a ..."."""
    if not mentions(sentence, name):
        return False
    named = re.escape(name)
    return (
        bool(_CONTRIBUTION.search(sentence))
        or re.search(rf"{named}\W{{0,3}}(\([^)]*\))?\W{{0,3}}(a|an|which|that|is|are)\b|\(\s*{named}\s*\)", sentence)
        is not None
    )


def third_person(sentence: str) -> str:
    """Drop a connective opening and say "the authors" for "we", so a sentence reads as an answer."""
    text = _LEAD_IN.sub("", sentence.replace("**", "")).strip()
    text = re.sub(r"\bwe\b", "the authors", text)
    text = re.sub(r"\bWe\b", "The authors", text)
    text = re.sub(r"\bour\b", "their", text)
    text = re.sub(r"\bOur\b", "Their", text)
    text = re.sub(r"\bus\b", "them", text)
    return text[:1].upper() + text[1:]


@dataclass
class Candidate:
    """A sentence of a source abstract, scored as an answer to the question."""

    source: int  # the source's number in the answer, from 1
    sentence: str
    score: float
    asked: frozenset[str] = frozenset()  # the question's words (stems) this sentence contains


class ExtractiveGenerator:
    """Picks the sentences of the retrieved abstracts that best answer the question.

    The Assistant hands over only the papers with enough evidence; a sentence's score is its
    cosine with the question, plus the rare question words it shares, plus what the question
    asks for (a number, a definition, code), as weighted in `ExtractiveWeights`. "Which
    papers...?" gets one sentence from every paper. Hand-written because no library answers
    extractively with citations per sentence.
    """

    name = "extractive"

    def __init__(self, sentences: Sequence[str] = (), weights: ExtractiveWeights | None = None):
        """`sentences`: the corpus's sentences, to weight question words by rarity (IDF), so that
        "GRPO" or "RMSE" in a question counts for more than "method"."""
        self.weights = weights or ExtractiveWeights()
        # Over sentences; scikit-learn's smooth IDF (every word weighs 1 or more): ExtractiveWeights were tuned on it.
        self.idf = IDF((stems(sentence) for sentence in sentences), smoothing=1, offset=1)

    def overlap(self, question_stems: set[str], sentence_stems: set[str], spread: dict[str, int]) -> float:
        """IDF-weighted share of the question's words that the sentence contains. A word found in
        several sentences of the same abstract ("transit stop placement" in a paper about it)
        names the paper's topic rather than the sentence that answers: it counts once per
        sentence it is in, divided among them."""
        if not question_stems:
            return 0.0
        shared = question_stems & sentence_stems
        return sum(self.idf[s] / spread.get(s, 1) for s in shared) / self.idf.total(question_stems)

    def score(self, question: str, sources: list[Hit], multilingual: bool = False) -> list[Candidate]:
        """Every sentence of the sources, best first."""
        w = self.weights
        spread = w.multilingual_spread if multilingual else 1.0
        wants_number = bool(_HOW_MUCH.search(question))
        wants_experiments = bool(_WHERE_TESTED.search(question))
        wants_code = bool(_CODE_QUESTION.search(question))
        top_dense = max((h.dense_score for h in sources), default=0.0)
        # A question that names a paper ("What speedup does Jacobi Forcing report?") is about it.
        named = {n for n, hit in enumerate(sources, start=1) if mentions(question, hit.paper.name)}
        asked = stems(question)
        candidates = []
        for n, hit in enumerate(sources, start=1):
            if named and n not in named:
                continue
            # Words naming the paper pick the paper, not the sentence that answers.
            question_stems = asked - stems(hit.paper.name)
            defining = n in named and bool(_DEFINITION.search(question))
            sentence_stems = {sentence: stems(sentence) for sentence in hit.sentence_scores}
            in_sentences: dict[str, int] = {}
            for own in sentence_stems.values():
                for stem in own & question_stems:
                    in_sentences[stem] = in_sentences.get(stem, 0) + 1
            for position, (sentence, cosine) in enumerate(hit.sentence_scores.items()):
                overlap = self.overlap(question_stems, sentence_stems[sentence], in_sentences)
                score = (
                    w.cosine * cosine + w.paper * (hit.dense_score - top_dense) / spread + spread * w.overlap * overlap
                )
                if position == 0:
                    score += spread * w.opening
                if _CONTRIBUTION.search(sentence) or hit.paper.name in sentence:
                    score += spread * w.contribution
                if defining and introduces(sentence, hit.paper.name):
                    score += spread * w.definition
                if wants_number and _NUMBER.search(sentence):
                    score += spread * (w.number + (w.counted if counts(question_stems, sentence) else 0.0))
                if wants_experiments and _EXPERIMENTS.search(sentence):
                    score += spread * w.experiments
                if _BOILERPLATE.search(sentence):
                    # "Code is available at ..." answers a question about code and nothing else.
                    score += w.boilerplate if wants_code else -w.boilerplate
                candidates.append(Candidate(n, sentence, score, frozenset(question_stems & sentence_stems[sentence])))
        return sorted(candidates, key=lambda c: -c.score)

    def select(self, question: str, sources: list[Hit], multilingual: bool = False) -> list[Candidate]:
        w = self.weights
        candidates = self.score(question, sources, multilingual)
        if not candidates:
            return []
        if asks_for_several(question):
            # Each paper's best sentence, in the order of the papers' ranks.
            best_of: dict[int, Candidate] = {}
            for c in candidates:
                best_of.setdefault(c.source, c)
            return [best_of[n] for n in sorted(best_of)[: w.max_papers]]
        if _WHICH.search(question):
            # "Which paper ...?" is answered by the best-ranked paper: its best sentence leads.
            top = min(c.source for c in candidates)
            lead = next(c for c in candidates if c.source == top)
            candidates.remove(lead)
            candidates.insert(
                0,
                Candidate(
                    lead.source,
                    lead.sentence,
                    max(lead.score, candidates[0].score if candidates else lead.score),
                    lead.asked,
                ),
            )
        return self.cover(candidates, multilingual)

    def cover(self, candidates: list[Candidate], multilingual: bool) -> list[Candidate]:
        """Sentences that together answer every part of the question: greedily, the best score
        plus `new_words` times the IDF share of the question's words no chosen sentence has yet
        ("the two modules ... and the speedup" takes the sentence with the speedup too), while
        within `margin` of the best sentence's score."""
        w = self.weights
        spread = w.multilingual_spread if multilingual else 1.0
        total = self.idf.total(set().union(*(c.asked for c in candidates))) or 1.0
        best = candidates[0].score
        chosen: list[Candidate] = []
        covered: set[str] = set()
        per_paper: dict[int, int] = {}
        left = list(candidates)

        def gain(c: Candidate) -> float:
            return c.score + (w.new_words * self.idf.total(c.asked - covered) / total if chosen else 0.0)

        while left and len(chosen) < w.max_sentences:
            pick = max(left, key=gain)
            if gain(pick) < best - w.margin * spread:
                break
            left.remove(pick)
            if per_paper.get(pick.source, 0) == w.per_paper:
                continue
            per_paper[pick.source] = per_paper.get(pick.source, 0) + 1
            chosen.append(pick)
            covered |= pick.asked
        return chosen

    def compose(self, question: str, sources: list[Hit]) -> str:
        chosen = self.select(question, sources, multilingual=is_cjk(question))
        parts = []
        introduced: set[int] = set()
        for c in chosen:
            # A bracketed number inside an abstract ("as in [7]") is not ours to cite.
            text = " ".join(MARKER.sub(" ", third_person(c.sentence)).split())
            end = text[-1] if text and text[-1] in ".!?" else "."
            text = text.rstrip(".!?")
            name = sources[c.source - 1].paper.name
            # Say which paper a sentence comes from the first time, unless the question or the sentence says it.
            if (
                c.source not in introduced
                and not name.endswith("…")
                and name not in text
                and not mentions(question, name)
            ):
                text = f"{name}: {text}"
            introduced.add(c.source)
            parts.append(f"{text} [{c.source}]{end}")
        return " ".join(parts)

    def stream(self, question: str, sources: list[Hit]) -> Iterator[str]:
        text = self.compose(question, sources)
        yield from re.findall(r"\S+\s*", text)


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
        prompts.SOURCE.format(n=n, name=hit.paper.name.replace('"', "'"), text=excerpt(hit, keep))
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

    def __init__(self, settings: Settings, client=None):
        """`client`: an `openai.OpenAI` (made from the settings when None) or anything with its
        `chat.completions.create` (tests script the replies)."""
        from openai import OpenAI

        self.settings = settings
        self.client = client or OpenAI(
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
            return GeneratorTimeout(
                f"the language model at {where} did not answer within {self.settings.llm_timeout:g} s"
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
                model=self.settings.llm_model,
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
                        where = self.settings.llm_base_url or "the OpenAI API"
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
            where = self.settings.llm_base_url or "the OpenAI API"
            raise GeneratorError(f"the language model at {where} returned an empty or unreadable answer")

    @property
    def _endpoint(self) -> str:
        return self.settings.llm_base_url or "the OpenAI API"

    def _formats(self) -> list[str]:
        """The response formats to try, in order: the one this endpoint accepted before, or all."""
        if self._endpoint in _ACCEPTED_FORMAT:
            known = _ACCEPTED_FORMAT[self._endpoint]
            return [known] if known else []
        return list(RESPONSE_FORMATS)

    def _structured(self, system: str, user: str, max_tokens: int, schema: dict) -> Iterator[str] | None:
        """The reply as a JSON text stream in the first response format the endpoint accepts
        (remembered), or None when it accepts none (text mode then, unless RAG_LLM_OUTPUT=json)."""
        if self.settings.llm_output == "text":
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
        if self.settings.llm_output == "json":
            raise GeneratorError(
                f"the language model at {self._endpoint} accepts no structured output "
                f"(RAG_LLM_OUTPUT=json); set RAG_LLM_OUTPUT=auto or text"
            )
        _ACCEPTED_FORMAT[self._endpoint] = None
        return None

    def stream(self, question: str, sources: list[Hit]) -> Iterator[str]:
        user = prompts.ANSWER_USER.format(
            sources=format_sources(sources, self.settings.llm_source_sentences), question=question
        )
        reply = self._structured(
            prompts.ANSWER_SYSTEM_JSON, user, self.settings.llm_max_tokens, answer_schema(len(sources))
        )
        if reply is None:
            yield from self.chat(prompts.ANSWER_SYSTEM, user, self.settings.llm_max_tokens)
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

    def condense(self, question: str, history: list[dict]) -> str:
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


def make_generator(settings: Settings, sentences: list[str]) -> Generator:
    """The generator the settings ask for; `auto` means the LLM only when an endpoint is set.
    `sentences` (the corpus's) serve the extractive generator's word weights."""
    if settings.generator == "llm" or (settings.generator == "auto" and settings.llm_base_url):
        return LLMGenerator(settings)
    return ExtractiveGenerator(sentences, settings.extractive)
