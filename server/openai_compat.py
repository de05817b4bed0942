"""OpenAI's chat-completions format on top of the assistant, for existing chat clients
(Open WebUI, LibreChat, the `openai` package): the last user message is the question, the
earlier user and assistant messages are the history, and the citations come back as a
"Sources" list at the end of the text, as OpenAI-style `annotations` and as an extra
`citations` field. Usage is counted in the English embedding model's word pieces (the
extractive answerer has no LLM tokenizer)."""

from __future__ import annotations

import json
import re
import time
import uuid
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag.answer.suggestions import next_questions
from rag.assistant import Answer
from rag.common.limits import MAX_HISTORY_TURNS, MAX_QUESTION_CHARS, MAX_TURN_CHARS

from .schemas import BY_AUTHORS, SCOPE, Authors, PaperIds, unicode_text


class ContentPart(BaseModel):
    model_config = ConfigDict(extra="ignore")
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        if isinstance(self.content, list):
            return " ".join(p.text for p in self.content if p.type == "text" and p.text)
        return self.content or ""


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class ChatMetadata(BaseModel):
    """OpenAI's free-form `metadata`; the service reads `paper_ids` and `authors`, its scope, and
    ignores the rest. OpenAI's own metadata values are strings, so the ids may also come as one
    string, separated by commas or spaces, and the authors as one, separated by ";"."""

    model_config = ConfigDict(extra="ignore")
    paper_ids: PaperIds | None = Field(None, description=SCOPE)
    authors: Authors | None = Field(None, description=BY_AUTHORS)

    @field_validator("paper_ids", mode="before")
    @classmethod
    def _listed(cls, value):
        return [part for part in re.split(r"[\s,]+", value) if part] if isinstance(value, str) else value

    @field_validator("authors", mode="before")
    @classmethod
    def _names(cls, value):
        return [part for part in value.split(";") if part.strip()] if isinstance(value, str) else value


class ChatCompletionRequest(BaseModel):
    """OpenAI's request as chat UIs send it. Sampling parameters, tool definitions and other
    fields are accepted and ignored (answers are deterministic and use no tools); system
    messages are not part of the question or the history; only the most recent turns that fit
    the history limit are used, each cut to its limit, so nothing the service ignores can make
    it do more work."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(None, examples=["icml-rag"])
    messages: list[ChatMessage] = Field(
        ...,
        min_length=1,
        examples=[[{"role": "user", "content": "What speedup does Jacobi Forcing report?"}]],
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    metadata: ChatMetadata | None = Field(None, examples=[{"paper_ids": ["22b01627a253"]}])

    @field_validator("messages")
    @classmethod
    def _has_a_question(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        for message in messages:
            unicode_text(message.text())
        users = [m for m in messages if m.role == "user" and m.text().strip()]
        if not users:
            raise ValueError("no user message with text")
        if (
            messages[-1].role == "user"
            and task_keys(messages[-1].text()) is None
            and len(messages[-1].text().strip()) > MAX_QUESTION_CHARS
        ):
            raise ValueError(f"the last user message must be at most {MAX_QUESTION_CHARS} characters")
        return messages

    @property
    def paper_ids(self) -> list[str] | None:
        """The scope the request's metadata names, else None (every paper)."""
        return self.metadata.paper_ids if self.metadata else None

    @property
    def authors(self) -> list[str] | None:
        """The authors the request's metadata scopes to, else None (every paper)."""
        return self.metadata.authors if self.metadata else None

    @property
    def continues(self) -> bool:
        """The request ends with an assistant message: a client asking to continue an answer."""
        return self.messages[-1].role == "assistant"

    @cached_property
    def task(self) -> list[tuple[str, str]] | None:
        """The keys of the JSON reply a background request asks for (see `task_keys`), else None."""
        return None if self.continues else task_keys(self.messages[-1].text())

    def _last_user(self) -> int:
        return max(i for i, m in enumerate(self.messages) if m.role == "user" and m.text().strip())

    def question(self) -> str:
        return self.messages[self._last_user()].text().strip()[:MAX_QUESTION_CHARS]

    def history(self, turns: int = MAX_HISTORY_TURNS) -> list[dict]:
        last_user = self._last_user()
        kept = [
            {"role": m.role, "content": m.text()[:MAX_TURN_CHARS]}
            for m in self.messages[:last_user]
            if m.role in ("user", "assistant") and m.text().strip()
        ]
        return kept[-turns:]


# Background requests of chat UIs (a title, tags, follow-up questions, search queries for the
# chat) are long prompts that embed the conversation and ask for a small JSON object, showing
# its shape: {"title": "..."}, { "tags": ["tag1", ...] }. The rule is general: a message that
# mentions JSON and shows a JSON object template is such a request; the template's keys and
# whether each holds a string or a list say what to send back.
_TEMPLATE = re.compile(r'\{\s*"(\w+)"\s*:\s*(\[|")')
_SPEAKER = re.compile(r"^\s*(?:USER|User|user|Human|HUMAN)\s*:\s*(.+)$", re.MULTILINE)


def task_keys(text: str) -> list[tuple[str, str]] | None:
    """[(key, "string" | "list"), ...] of the JSON object `text` asks for, or None."""
    if "json" not in text.lower():
        return None
    keys = [(m.group(1), "list" if m.group(2) == "[" else "string") for m in _TEMPLATE.finditer(text)]
    return list(dict.fromkeys(keys)) or None


def chat_questions(text: str) -> list[str]:
    """The user turns a background prompt quotes ("USER: ..." lines), oldest first."""
    return [q.strip() for q in _SPEAKER.findall(text) if q.strip()]


def task_reply(keys: list[tuple[str, str]], questions: list[str], papers: list[str]) -> dict:
    """A short JSON reply of the kind asked for: a title from the first question, tags and
    follow-up questions from the papers the conversation is about, the last question as a
    search query; any other key empty (e.g. an autocompletion: the service adds no text)."""
    first = questions[0] if questions else ""
    reply: dict = {}
    for key, kind in keys:
        name = key.lower()
        if kind == "string" and ("title" in name or "name" in name):
            words = first.rstrip("?.!").split()
            reply[key] = " ".join(words[:8]) + ("…" if len(words) > 8 else "") if words else "ICML 2026 papers"
        elif kind == "string":
            reply[key] = ""
        elif "tag" in name:
            reply[key] = ["ICML 2026", *papers[:2]]
        elif "follow" in name or "question" in name:
            reply[key] = next_questions(papers[:2], questions)
        elif "quer" in name:
            reply[key] = questions[-1:] or [first]
        else:
            reply[key] = []
    return reply


def sources_text(answer: Answer) -> str:
    if not answer.citations:
        return ""
    lines = [f"[{c.n}] {c.name} (paper {c.paper_id})" for c in answer.citations]
    return "\n\nSources:\n" + "\n".join(lines)


def url_citations(answer: Answer, content: str, page_url: str) -> list[dict]:
    """OpenAI-style `url_citation` annotations, which chat UIs turn into source chips: for each
    citation, the answer sentence that carries its first marker and a link that opens the
    paper on the service's page."""
    found = []
    for c in answer.citations:
        marker = f"[{c.n}]"
        at = content.find(marker)
        if at < 0:
            continue
        start = max(content.rfind(". ", 0, at) + 2, content.rfind("\n", 0, at) + 1, 0)
        found.append(
            {
                "type": "url_citation",
                "url_citation": {
                    "url": f"{page_url}#paper={c.paper_id}",
                    "title": c.name,
                    "start_index": start,
                    "end_index": at + len(marker),
                },
            }
        )
    return found


def usage(prompt_tokens: int, completion_tokens: int) -> dict:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(content: str, model: str, tokens: dict, notes: list[dict] | None = None, **extra) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if notes:
        message["annotations"] = notes
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": tokens,
        **extra,
    }


def answer_completion(answer: Answer, page_url: str) -> tuple[str, dict]:
    """(the content, the extra fields) of a completion that carries an answer."""
    content = answer.text + sources_text(answer)
    return content, {"notes": url_citations(answer, content, page_url), **answer_fields(answer)}


def answer_fields(answer: Answer) -> dict:
    """What a completion carries of the answer besides its text, whole or as the last chunk."""
    return {
        "answer_id": answer.answer_id,
        "citations": [c.to_dict() for c in answer.citations],
        "abstained": answer.abstained,
        "confidence": answer.confidence,
        "missing": answer.missing,
    }


class ChunkWriter:
    """Server-sent `chat.completion.chunk` events, as OpenAI streams them; with
    `include_usage`, a last chunk with no choices and the usage, as OpenAI sends it."""

    def __init__(self, model: str, include_usage: bool = False):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.include_usage = include_usage
        self.streamed: list[str] = []

    def chunk(self, delta: dict | None, finish_reason: str | None = None, **extra) -> str:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def start(self) -> str:
        return self.chunk({"role": "assistant", "content": ""})

    def text(self, piece: str) -> str:
        self.streamed.append(piece)
        return self.chunk({"content": piece})

    @property
    def content(self) -> str:
        return "".join(self.streamed)

    def finish(self, answer: Answer, page_url: str) -> str:
        tail = sources_text(answer)
        if self.content.strip() != answer.text:
            # An abstention or an LLM answer replaced by the extractive fallback: send the final text.
            tail = "\n\n" + answer.text + tail
        out = self.text(tail) if tail else ""
        notes = url_citations(answer, self.content, page_url)
        return out + self.chunk(
            {"annotations": notes} if notes else {},
            "stop",
            **answer_fields(answer),
        )

    def whole(self, content: str) -> str:
        """A reply known in full (a background task's JSON, a continuation with nothing to add)."""
        return (self.text(content) if content else "") + self.chunk({}, "stop")

    def usage(self, tokens: dict) -> str:
        return self.chunk(None, usage=tokens) if self.include_usage else ""

    @staticmethod
    def error(code: str, message: str) -> str:
        return f"data: {json.dumps({'error': {'code': code, 'message': message}})}\n\n"

    @staticmethod
    def done() -> str:
        return "data: [DONE]\n\n"


def models(model: str) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "icml-rag"}]}
