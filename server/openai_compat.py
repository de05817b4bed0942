"""OpenAI's chat-completions format on top of the assistant, for existing chat clients
(Open WebUI, LibreChat, the `openai` package): the last user message is the question, the
earlier user and assistant messages are the history, and the citations come back both as a
"Sources" list at the end of the text and as an extra `citations` field."""

from __future__ import annotations

import json
import time
import uuid
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from rag.assistant import Answer

from .schemas import unicode_text


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


class ChatCompletionRequest(BaseModel):
    """OpenAI's request; sampling parameters are accepted and ignored (answers are deterministic)."""

    model_config = ConfigDict(extra="ignore")
    model: str | None = Field(None, examples=["icml-rag"])
    messages: list[ChatMessage] = Field(
        ..., min_length=1, max_length=41,
        examples=[[{"role": "user", "content": "What speedup does Jacobi Forcing report?"}]],
    )
    stream: bool = False

    @field_validator("messages")
    @classmethod
    def _ends_with_a_question(cls, messages: list[ChatMessage]) -> list[ChatMessage]:
        for message in messages:
            unicode_text(message.text())
        if messages[-1].role != "user" or not messages[-1].text().strip():
            raise ValueError("the last message must be a non-empty user message")
        if len(messages[-1].text().strip()) > 2000:
            raise ValueError("the last user message must be at most 2000 characters")
        return messages

    def question(self) -> str:
        return self.messages[-1].text().strip()

    def history(self) -> list[dict]:
        turns = [{"role": m.role, "content": m.text()} for m in self.messages[:-1] if m.role in ("user", "assistant")]
        return turns[-20:]


def sources_text(answer: Answer) -> str:
    if not answer.citations:
        return ""
    lines = [f"[{c.n}] {c.name} (paper {c.paper_id})" for c in answer.citations]
    return "\n\nSources:\n" + "\n".join(lines)


def completion(answer: Answer, model: str) -> dict:
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": answer.text + sources_text(answer)},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
        "citations": [c.to_dict() for c in answer.citations],
        "abstained": answer.abstained,
    }


class ChunkWriter:
    """Server-sent `chat.completion.chunk` events, as OpenAI streams them."""

    def __init__(self, model: str):
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.model = model
        self.streamed: list[str] = []

    def chunk(self, delta: dict, finish_reason: str | None = None, **extra) -> str:
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return f"data: {json.dumps(body, ensure_ascii=False)}\n\n"

    def start(self) -> str:
        return self.chunk({"role": "assistant", "content": ""})

    def text(self, piece: str) -> str:
        self.streamed.append(piece)
        return self.chunk({"content": piece})

    def finish(self, answer: Answer) -> str:
        tail = sources_text(answer)
        if "".join(self.streamed).strip() != answer.text:
            # An abstention or an LLM answer replaced by the extractive fallback: send the final text.
            tail = "\n\n" + answer.text + tail
        return (
            self.chunk({"content": tail}) if tail else ""
        ) + self.chunk({}, "stop", citations=[c.to_dict() for c in answer.citations], abstained=answer.abstained)

    @staticmethod
    def error(code: str, message: str) -> str:
        return f"data: {json.dumps({'error': {'code': code, 'message': message}})}\n\n"

    @staticmethod
    def done() -> str:
        return "data: [DONE]\n\n"


def models(model: str) -> dict:
    return {"object": "list", "data": [{"id": model, "object": "model", "created": 0, "owned_by": "icml-rag"}]}
