"""FastAPI app: the index and models load once at start-up; routes call the library."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag.config import Settings, get_settings
from rag.errors import QueryError, RagError

from .schemas import Health, SearchRequest, SearchResponse


def _error(status: int, code: str, message: str) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status)


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        from rag.index import load_index
        from rag.retrieval import Retriever

        index = await run_in_threadpool(load_index, settings)
        app.state.index = index
        app.state.retriever = Retriever(index, settings)
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
            generator="none",
        )

    @app.post("/search", response_model=SearchResponse)
    async def search(body: SearchRequest, request: Request):
        result = await run_in_threadpool(request.app.state.retriever.search, body.query, body.k)
        return {"results": [hit.to_dict() for hit in result.hits]}

    return app
