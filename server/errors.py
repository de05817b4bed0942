"""Every error answers `{"error": {"code", "message"}}`: `ApiError` for routes and dependencies,
and one handler per kind of exception (validation, HTTP, library, unexpected)."""

from __future__ import annotations

import logging
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from rag.common.errors import (
    CorpusError,
    GeneratorError,
    GeneratorTimeout,
    PaperNotFoundError,
    QueryError,
    RagError,
    ScopeError,
    UnknownAnswerError,
)

from .schemas import ErrorResponse

log = logging.getLogger("rag.http")


class ApiError(Exception):
    """An HTTP error with its status, code and message, raised from dependencies and routes."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


ERRORS = {
    400: "not JSON, not a seed-format file, or a query that cannot be served",
    401: "missing or wrong `Authorization: Bearer <RAG_API_KEY>`",
    404: "no such paper (an unknown id in `paper_ids` too), or no such answer to rate",
    413: "request body over RAG_MAX_BODY_BYTES",
    422: "invalid request",
    429: "too many answers in flight; retry after Retry-After seconds",
    502: "the LLM endpoint failed",
    503: "the index is loading or unusable, or the feedback database is down",
    504: "the LLM endpoint timed out",
}


def errors(*statuses: int) -> dict[int | str, dict[str, Any]]:
    """OpenAPI `responses` for these error statuses, all answering ErrorResponse."""
    return {status: {"model": ErrorResponse, "description": ERRORS[status]} for status in statuses}


def error_response(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


def install_handlers(app: FastAPI, llm_errors) -> None:
    """`llm_errors`: the /metrics counter of LLM failures that reach a client."""

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError):
        return error_response(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        found = exc.errors()
        first = found[0] if found else {}
        if first.get("type") == "json_invalid":
            return error_response(400, "invalid_json", "the request body is not valid JSON")
        where = ".".join(str(p) for p in first.get("loc", []) if p != "body")
        message = first.get("msg", "invalid request").removeprefix("Value error, ")
        return error_response(422, "invalid_request", f"{where}: {message}" if where else message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        return error_response(
            exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail), getattr(exc, "headers", None)
        )

    @app.exception_handler(CorpusError)
    async def _corpus(request: Request, exc: CorpusError):
        return error_response(400, exc.code, str(exc))

    @app.exception_handler(QueryError)
    async def _query(request: Request, exc: QueryError):
        # A bad scope is a field of the request that cannot be valid, as pydantic's 422s are.
        return error_response(422 if isinstance(exc, ScopeError) else 400, exc.code, str(exc))

    @app.exception_handler(GeneratorError)
    async def _generator(request: Request, exc: GeneratorError):
        timeout = isinstance(exc, GeneratorTimeout)
        llm_errors.labels("timeout" if timeout else "error").inc()
        return error_response(504 if timeout else 502, exc.code, str(exc))

    @app.exception_handler(UnknownAnswerError)
    @app.exception_handler(PaperNotFoundError)
    async def _not_found(request: Request, exc: RagError):
        return error_response(404, exc.code, str(exc))

    @app.exception_handler(RagError)
    async def _rag(request: Request, exc: RagError):
        return error_response(503, exc.code, str(exc))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return error_response(500, "internal_error", "internal error; it has been logged")
