"""Answers as server-sent events: the assistant's blocking generator driven off the event loop,
as /ask events (token, citations, done) or OpenAI chat-completion chunks."""

from __future__ import annotations

import json
import logging

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse

from rag.assistant import Done
from rag.common.errors import RagError

log = logging.getLogger("rag.http")


def event_stream(events) -> StreamingResponse:
    return StreamingResponse(
        events, media_type="text/event-stream", headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
    )


async def _pieces(stream, request: Request):
    """Drive the assistant's blocking generator in worker threads; stop when the client leaves."""
    done = object()
    try:
        while not await request.is_disconnected():
            piece = await run_in_threadpool(next, stream, done)
            if piece is done:
                return
            yield piece
    finally:
        stream.close()


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def ask_events(stream, request: Request):
    try:
        async for event in _pieces(stream, request):
            if isinstance(event, Done):
                yield _sse("citations", {"citations": [c.to_dict() for c in event.answer.citations]})
                yield _sse("done", event.answer.to_dict())
            else:
                yield _sse("token", {"text": event.text})
    except RagError as exc:
        yield _sse("error", {"code": exc.code, "message": str(exc)})
    except Exception:  # headers are sent: end the stream with an error event, not a cut connection
        log.exception("unhandled error while streaming /ask")
        yield _sse("error", {"code": "internal_error", "message": "internal error; it has been logged"})


async def chat_chunks(stream, request: Request, writer, page_url: str, tokens):
    """`tokens(content)`: the usage of a reply with this content."""
    yield writer.start()
    try:
        async for event in _pieces(stream, request):
            yield writer.finish(event.answer, page_url) if isinstance(event, Done) else writer.text(event.text)
        yield writer.usage(tokens(writer.content))
    except RagError as exc:
        yield writer.error(exc.code, str(exc))
    except Exception:  # the same for OpenAI-style streams
        log.exception("unhandled error while streaming /v1/chat/completions")
        yield writer.error("internal_error", "internal error; it has been logged")
    yield writer.done()


async def iter_async(items):
    """Chunks known in advance, as the async iterator StreamingResponse takes."""
    for item in items:
        if item:
            yield item
