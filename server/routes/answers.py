"""Search and answers: /search, /ask, and the OpenAI-compatible /v1, each scoped to chosen papers
when the request names them (`paper_ids`; /v1 in its `metadata`)."""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from rag.common.limits import MAX_QUESTION_CHARS
from rag.common.settings import Settings
from rag.index.embedding import tokenizer_of

from .. import openai_compat
from ..dependencies import assistant, authorised, settings
from ..errors import errors
from ..schemas import AskRequest, AskResponse, SearchRequest, SearchResponse
from ..streaming import ask_events, chat_chunks, event_stream, iter_async

router = APIRouter(dependencies=[Depends(authorised)], responses=errors(401))
STREAMED: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE with stream=true"}
}


@router.post("/search", response_model=SearchResponse, responses=errors(400, 404, 413, 422, 503))
async def search(body: SearchRequest, ready=Depends(assistant)):
    result = await run_in_threadpool(ready.retriever.within(body.paper_ids, body.authors).search, body.query, body.k)
    return {"results": [hit.to_dict() for hit in result.hits]}


@router.post(
    "/ask", response_model=AskResponse, responses={**STREAMED, **errors(400, 404, 413, 422, 429, 502, 503, 504)}
)
async def ask(body: AskRequest, request: Request, ready=Depends(assistant)):
    history = [turn.model_dump() for turn in body.history]
    ready = ready.within(body.paper_ids, body.authors)  # before a stream starts: an unknown id is a 404, not an event
    if not body.stream:
        answer = await run_in_threadpool(ready.ask, body.question, history, body.k)
        return answer.to_dict()
    return event_stream(ask_events(ready.stream(body.question, history, body.k), request))


@router.get("/v1/models")
async def models(settings: Settings = Depends(settings)):
    return openai_compat.models(settings.service.model_id)


def _task_reply(ready, body: openai_compat.ChatCompletionRequest) -> str:
    """The JSON a chat UI's background request asks for, from the conversation it quotes."""
    questions = openai_compat.chat_questions(body.messages[-1].text()) or [
        turn["content"] for turn in body.history() if turn["role"] == "user"
    ]
    # The papers the conversation is about: its questions together, the latest kept when long.
    about = " ".join(questions)[-MAX_QUESTION_CHARS:]
    papers = [hit.paper.name for hit in ready.retriever.search(about, 3).hits] if about.strip() else []
    return json.dumps(openai_compat.task_reply(body.task or [], questions, papers), ensure_ascii=False)


@router.post("/v1/chat/completions", responses={**STREAMED, **errors(400, 404, 413, 422, 429, 502, 503, 504)})
async def chat_completions(
    body: openai_compat.ChatCompletionRequest,
    request: Request,
    ready=Depends(assistant),
    settings: Settings = Depends(settings),
):
    ready = ready.within(body.paper_ids, body.authors)
    tokenize = tokenizer_of(ready.index.embedder)
    prompt_tokens = sum(len(tokenize(turn["content"])) for turn in body.history()) + len(tokenize(body.question()))

    def tokens(content: str) -> dict:
        return openai_compat.usage(prompt_tokens, len(tokenize(content)))

    page_url = str(request.base_url)
    writer = openai_compat.ChunkWriter(
        settings.service.model_id, bool(body.stream_options and body.stream_options.include_usage)
    )
    if body.continues or body.task:
        # Continuing a finished answer adds nothing; a background request gets its JSON.
        content = "" if body.continues else await run_in_threadpool(_task_reply, ready, body)
        if not body.stream:
            return openai_compat.completion(content, settings.service.model_id, tokens(content))
        return event_stream(
            iter_async([writer.start(), writer.whole(content), writer.usage(tokens(content)), writer.done()])
        )
    if not body.stream:
        answer = await run_in_threadpool(ready.ask, body.question(), body.history())
        content, extra = openai_compat.answer_completion(answer, page_url)
        return openai_compat.completion(content, settings.service.model_id, tokens(content), **extra)
    pieces = ready.stream(body.question(), body.history())
    return event_stream(chat_chunks(pieces, request, writer, page_url, tokens))
