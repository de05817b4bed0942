"""Search and answers: /search, /ask, and the OpenAI-compatible /v1."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Request
from fastapi.concurrency import run_in_threadpool

from rag.config import Settings

from .. import openai_compat
from ..dependencies import assistant, authorised, settings
from ..errors import errors
from ..schemas import AskRequest, AskResponse, SearchRequest, SearchResponse
from ..streaming import ask_events, chat_chunks, event_stream

router = APIRouter(dependencies=[Depends(authorised)], responses=errors(401))
STREAMED = {200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE with stream=true"}}


@router.post("/search", response_model=SearchResponse, responses=errors(400, 413, 422, 503))
async def search(body: SearchRequest, ready=Depends(assistant)):
    result = await run_in_threadpool(ready.retriever.search, body.query, body.k)
    return {"results": [hit.to_dict() for hit in result.hits]}


@router.post("/ask", response_model=AskResponse, responses={**STREAMED, **errors(400, 413, 422, 429, 502, 503, 504)})
async def ask(body: AskRequest, request: Request, ready=Depends(assistant)):
    history = [turn.model_dump() for turn in body.history]
    if not body.stream:
        answer = await run_in_threadpool(ready.ask, body.question, history, body.k)
        return answer.to_dict()
    return event_stream(ask_events(ready.stream(body.question, history, body.k), request))


@router.get("/v1/models")
async def models(settings: Settings = Depends(settings)):
    return openai_compat.models(settings.model_id)


@router.post("/v1/chat/completions", responses={**STREAMED, **errors(400, 413, 422, 429, 502, 503, 504)})
async def chat_completions(body: openai_compat.ChatCompletionRequest, request: Request, ready=Depends(assistant),
                           settings: Settings = Depends(settings)):
    if not body.stream:
        answer = await run_in_threadpool(ready.ask, body.question(), body.history())
        return openai_compat.completion(answer, settings.model_id)
    pieces = ready.stream(body.question(), body.history())
    return event_stream(chat_chunks(pieces, request, openai_compat.ChunkWriter(settings.model_id)))
