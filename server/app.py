"""FastAPI app: the index and models load once at start-up; routes call the library."""

from __future__ import annotations

import json
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag.config import Settings, get_settings
from rag.errors import GeneratorError, GeneratorTimeout, QueryError, RagError

from .schemas import AskRequest, AskResponse, Health, PaperOut, PapersResponse, SearchRequest, SearchResponse


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from rag.assistant import Assistant
        from rag.index import load_index

        index = await run_in_threadpool(load_index, settings)
        app.state.index = index
        app.state.assistant = Assistant(index, settings)
        yield

    app = FastAPI(title="icml-rag", version="0.1.0", lifespan=lifespan)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0] if exc.errors() else {}
        where = ".".join(str(p) for p in first.get("loc", []) if p != "body")
        return _error(422, "invalid_request", f"{where}: {first.get('msg', 'invalid request')}".strip(": "))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        codes = {404: "not_found", 405: "method_not_allowed"}
        return _error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail))

    @app.exception_handler(QueryError)
    async def _query(request: Request, exc: QueryError):
        return _error(400, exc.code, str(exc))

    @app.exception_handler(GeneratorError)
    async def _generator(request: Request, exc: GeneratorError):
        return _error(504 if isinstance(exc, GeneratorTimeout) else 502, exc.code, str(exc))

    @app.exception_handler(RagError)
    async def _rag(request: Request, exc: RagError):
        return _error(503, exc.code, str(exc))

    @app.get("/health", response_model=Health)
    async def health(request: Request):
        index = request.app.state.index
        return Health(
            status="ok",
            papers=len(index.corpus),
            chunks=index.chunks,
            embedding_model=index.manifest["embedding_model"],
            generator=request.app.state.assistant.generator.name,
        )

    @app.post("/search", response_model=SearchResponse)
    async def search(body: SearchRequest, request: Request):
        result = await run_in_threadpool(request.app.state.assistant.retriever.search, body.query, body.k)
        return {"results": [hit.to_dict() for hit in result.hits]}

    @app.post("/ask", response_model=AskResponse)
    async def ask(body: AskRequest, request: Request):
        assistant = request.app.state.assistant
        history = [turn.model_dump() for turn in body.history]
        if not body.stream:
            answer = await run_in_threadpool(assistant.ask, body.question, history, body.k)
            return answer.to_dict()
        return StreamingResponse(
            _events(assistant, body.question, history, body.k),
            media_type="text/event-stream",
            headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
        )

    @app.get("/papers", response_model=PapersResponse)
    async def papers(request: Request):
        return {"papers": [p.to_dict() for p in request.app.state.index.corpus.papers]}

    @app.get("/papers/{paper_id}", response_model=PaperOut)
    async def paper(paper_id: str, request: Request):
        found = request.app.state.index.corpus.get(paper_id)
        if found is None:
            return _error(404, "paper_not_found", f"no paper with id {paper_id!r}")
        return found.to_dict()

    return app


def _sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n"


async def _events(assistant, question: str, history: list[dict], k: int):
    """The answer as server-sent events; the blocking generator runs in worker threads."""
    from rag.assistant import Answer

    pieces = assistant.stream(question, history, k)
    done = object()
    while True:
        try:
            piece = await run_in_threadpool(next, pieces, done)
        except RagError as exc:
            yield _sse("error", {"code": exc.code, "message": str(exc)})
            return
        if piece is done:
            return
        if isinstance(piece, Answer):
            yield _sse("citations", {"citations": [c.to_dict() for c in piece.citations]})
            yield _sse("done", piece.to_dict())
        else:
            yield _sse("token", {"text": piece})
