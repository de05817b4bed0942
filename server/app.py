"""FastAPI app: the index and models load once, in the background at start-up; routes call the
library off the event loop; every error answers `{"error": {"code", "message"}}`."""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

from asgi_correlation_id import CorrelationIdMiddleware
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

import rag
from rag.config import Settings, get_settings
from rag.errors import CorpusError, GeneratorError, GeneratorTimeout, QueryError, RagError

from . import openai_compat
from .metrics import Metrics
from .schemas import (
    AddPapersRequest,
    AddPapersResponse,
    AskRequest,
    AskResponse,
    ErrorResponse,
    Health,
    Liveness,
    PaperOut,
    PapersResponse,
    SearchRequest,
    SearchResponse,
)

log = logging.getLogger("rag.http")
STATIC = Path(__file__).parent / "static"


class ApiError(Exception):
    """An HTTP error with its status, code and message, raised from dependencies and routes."""

    def __init__(self, status: int, code: str, message: str, headers: dict | None = None):
        super().__init__(message)
        self.status, self.code, self.message, self.headers = status, code, message, headers


ERRORS = {
    400: "not JSON, not a seed-format file, or a query that cannot be served",
    401: "missing or wrong `Authorization: Bearer <RAG_API_KEY>`",
    404: "no such paper",
    413: "request body over RAG_MAX_BODY_BYTES",
    422: "invalid request",
    429: "too many answers in flight; retry after Retry-After seconds",
    502: "the LLM endpoint failed",
    503: "the index is loading or unusable",
    504: "the LLM endpoint timed out",
}


def errors(*statuses: int) -> dict:
    """OpenAPI `responses` for these error statuses, all answering ErrorResponse."""
    return {status: {"model": ErrorResponse, "description": ERRORS[status]} for status in statuses}


def _error(status: int, code: str, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": {"code": code, "message": message}}, status_code=status, headers=headers)


ANSWER_PATHS = ("/ask", "/v1/chat/completions")


class LimitsAndLogging:
    """ASGI middleware: refuses bodies over the limit (declared or streamed) with 413 and answers
    beyond `max_answers` at once with 429, logs one JSON line per request (method, route,
    status, milliseconds, request id; never the question) and counts it for /metrics.

    Answers are counted here, around the whole request, because only here is the end certain:
    the count drops when the response is complete or the client has gone, streamed or not."""

    def __init__(self, app, max_body_bytes: int, max_answers: int, in_flight: dict, metrics: Metrics):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.max_answers = max_answers
        self.in_flight = in_flight
        self.metrics = metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = time.perf_counter()
        status = {"code": 500}

        async def send_logged(message):
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        answering = scope["path"] in ANSWER_PATHS and scope["method"] == "POST"
        if answering:
            self.in_flight["answers"] += 1
        try:
            declared = dict(scope["headers"]).get(b"content-length", b"0")
            try:
                oversized = int(declared) > self.max_body_bytes
            except ValueError:
                oversized = True
            if oversized:
                too_large = _error(413, "body_too_large", f"request body is over {self.max_body_bytes} bytes")
                await too_large(scope, receive, send_logged)
            elif answering and self.in_flight["answers"] > self.max_answers:
                busy = _error(429, "too_many_answers", f"{self.max_answers} answers are being served; retry shortly",
                              {"Retry-After": "1"})
                await busy(scope, receive, send_logged)
            else:
                received = 0

                async def receive_limited():
                    nonlocal received
                    message = await receive()
                    received += len(message.get("body", b""))
                    if received > self.max_body_bytes:
                        # FastAPI passes an HTTPException raised while reading the body through as is.
                        raise HTTPException(413, f"request body is over {self.max_body_bytes} bytes")
                    return message

                await self.app(scope, receive_limited, send_logged)
        finally:
            if answering:
                self.in_flight["answers"] -= 1
            # The route's template ("/papers/{paper_id}"), not the path: one series per route.
            route = getattr(scope.get("route"), "path", None)
            seconds = time.perf_counter() - started
            self.metrics.request(route or "unrouted", scope["method"], status["code"], seconds)
            log.info("request", extra={"method": scope["method"], "route": route or scope["path"],
                                       "status": status["code"], "ms": round(seconds * 1000, 1)})


def _configure_logging() -> None:
    """uvicorn configures only its own loggers: give ours a handler once per process, writing one
    JSON object per line with the request id (X-Request-ID) of the request being served."""
    from asgi_correlation_id import CorrelationIdFilter
    from pythonjsonlogger.json import JsonFormatter

    logger = logging.getLogger("rag")
    if not logger.handlers:
        handler = logging.StreamHandler()
        handler.addFilter(CorrelationIdFilter(name="request_id", default_value="-"))
        handler.setFormatter(JsonFormatter("{asctime}{levelname}{name}{message}{correlation_id}", style="{",
                                           rename_fields={"levelname": "level", "name": "logger",
                                                          "correlation_id": "request_id", "asctime": "time"},
                                           json_ensure_ascii=False))
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    _configure_logging()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        """Load in the background so /health can answer 503 "loading" until the index is ready."""
        app.state.assistant = None
        app.state.load_error = None
        app.state.checked = 0.0
        app.state.reloading = False
        app.state.add_lock = asyncio.Lock()

        def load():
            try:
                app.state.assistant = make_assistant()
                log.info("ready", extra={"index": str(app.state.assistant.index.path)})
            except Exception as exc:  # kept and reported by /health; the service stays up
                app.state.load_error = exc if isinstance(exc, RagError) else RagError(f"cannot load the index: {exc}")
                log.error("load_failed", extra={"error": str(app.state.load_error)})

        task = asyncio.create_task(run_in_threadpool(load))
        yield
        task.cancel()

    app = FastAPI(
        title="icml-rag",
        version=rag.__version__,
        description="Questions about the ICML 2026 abstracts, answered with checked citations.",
        lifespan=lifespan,
    )
    in_flight = {"answers": 0}
    metrics = Metrics(in_flight)

    def make_assistant():
        """The one place an index is loaded into an assistant (start, reload, add)."""
        from rag.assistant import Assistant
        from rag.index import load_index

        made = Assistant(load_index(settings), settings, observer=metrics.answer)
        metrics.index(made.index)
        return made

    app.add_middleware(LimitsAndLogging, max_body_bytes=settings.max_body_bytes,
                       max_answers=settings.max_answers_in_flight, in_flight=in_flight, metrics=metrics)
    # Outermost: every log line of a request, the request line included, carries its id, and the
    # response echoes it in X-Request-ID (the caller's own id when it sends a valid one).
    app.add_middleware(CorrelationIdMiddleware, header_name="X-Request-ID")
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )

    # -- errors -------------------------------------------------------------------------------

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError):
        return _error(exc.status, exc.code, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = exc.errors()
        first = errors[0] if errors else {}
        if first.get("type") == "json_invalid":
            return _error(400, "invalid_json", "the request body is not valid JSON")
        where = ".".join(str(p) for p in first.get("loc", []) if p != "body")
        message = first.get("msg", "invalid request").removeprefix("Value error, ")
        return _error(422, "invalid_request", f"{where}: {message}" if where else message)

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        codes = {404: "not_found", 405: "method_not_allowed", 413: "body_too_large"}
        return _error(exc.status_code, codes.get(exc.status_code, "http_error"), str(exc.detail),
                      getattr(exc, "headers", None))

    @app.exception_handler(CorpusError)
    async def _corpus(request: Request, exc: CorpusError):
        return _error(400, exc.code, str(exc))

    @app.exception_handler(QueryError)
    async def _query(request: Request, exc: QueryError):
        return _error(400, exc.code, str(exc))

    @app.exception_handler(GeneratorError)
    async def _generator(request: Request, exc: GeneratorError):
        timeout = isinstance(exc, GeneratorTimeout)
        metrics.llm_errors.labels("timeout" if timeout else "error").inc()
        return _error(504 if timeout else 502, exc.code, str(exc))

    @app.exception_handler(RagError)
    async def _rag(request: Request, exc: RagError):
        return _error(503, exc.code, str(exc))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception):
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        return _error(500, "internal_error", "internal error; it has been logged")

    # -- dependencies -------------------------------------------------------------------------

    # FastAPI's scheme declares the key in the OpenAPI document (an Authorize button in /docs);
    # auto_error off: a missing key gets our 401 envelope, and none is needed without RAG_API_KEY.
    bearer = HTTPBearer(auto_error=False, description="RAG_API_KEY, when the service has one")

    def authorised(credentials: HTTPAuthorizationCredentials | None = Depends(bearer)) -> None:
        if not settings.api_key:
            return
        if credentials is None or not secrets.compare_digest(credentials.credentials.strip(), settings.api_key):
            raise ApiError(401, "unauthorized", "this service needs `Authorization: Bearer <RAG_API_KEY>`",
                           {"WWW-Authenticate": "Bearer"})

    current = Path(settings.index_dir) / "current"

    def follow_current(app: FastAPI) -> None:
        """Another process (rag add, another worker) published a new build: load it in the
        background and switch when ready; until then the loaded one keeps serving."""
        state = app.state
        if state.reloading or time.monotonic() - state.checked < 1.0:
            return
        state.checked = time.monotonic()
        if current.resolve() == state.assistant.index.path:
            return
        state.reloading = True

        def reload():
            try:
                state.assistant = make_assistant()
                log.info("reloaded", extra={"index": str(state.assistant.index.path)})
            except Exception as exc:  # the previous index keeps serving
                log.error("reload_failed", extra={"error": str(exc)})
            finally:
                state.reloading = False

        threading.Thread(target=reload, name="reload-index", daemon=True).start()

    def assistant(request: Request):
        if request.app.state.assistant is not None:
            follow_current(request.app)
        if request.app.state.assistant is None:
            error = request.app.state.load_error
            if error is not None:
                raise ApiError(503, error.code, str(error))
            raise ApiError(503, "loading", "the index is still loading; retry in a few seconds",
                           {"Retry-After": "2"})
        return request.app.state.assistant

    # -- open routes --------------------------------------------------------------------------

    @app.get("/health", response_model=Health, responses=errors(503))
    async def health(request: Request):
        ready = assistant(request)
        return Health(
            status="ok",
            papers=len(ready.index.corpus),
            chunks=ready.index.chunks,
            embedding_model=ready.index.manifest["embedding_model"],
            generator=ready.generator.name,
            answers_in_flight=in_flight["answers"],
        )

    @app.get("/livez", response_model=Liveness)
    async def livez():
        """The process answers (for a liveness probe: restart it when this fails)."""
        return Liveness(status="alive")

    @app.get("/readyz", response_model=Health, responses=errors(503))
    async def readyz(request: Request):
        """The index is loaded and answers can be served (for a readiness probe); 503 while loading."""
        return await health(request)

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")

    # -- routes behind the API key ------------------------------------------------------------

    api = APIRouter(dependencies=[Depends(authorised)], responses=errors(401))

    @api.post("/search", response_model=SearchResponse, responses=errors(400, 413, 422, 503))
    async def search(body: SearchRequest, ready=Depends(assistant)):
        result = await run_in_threadpool(ready.retriever.search, body.query, body.k)
        return {"results": [hit.to_dict() for hit in result.hits]}

    @api.post("/ask", response_model=AskResponse,
              responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE with stream=true"},
                         **errors(400, 413, 422, 429, 502, 503, 504)})
    async def ask(body: AskRequest, request: Request, ready=Depends(assistant)):
        history = [turn.model_dump() for turn in body.history]
        if not body.stream:
            answer = await run_in_threadpool(ready.ask, body.question, history, body.k)
            return answer.to_dict()
        return _event_stream(_ask_events(ready.stream(body.question, history, body.k), request))

    @api.get("/papers", response_model=PapersResponse, responses=errors(503))
    async def papers(ready=Depends(assistant)):
        return {"papers": [p.to_dict() for p in ready.index.corpus.papers]}

    @api.post("/papers", response_model=AddPapersResponse, status_code=201, dependencies=[Depends(assistant)],
              responses=errors(400, 413, 422, 503))
    async def add_papers(body: AddPapersRequest, request: Request):
        """Add abstracts without a full rebuild; searches meanwhile see the old index."""
        from rag.index import add_seed_texts

        async with request.app.state.add_lock:
            result = await run_in_threadpool(add_seed_texts, settings, [(body.filename, body.content.encode())])
            if result.build is not None:
                request.app.state.assistant = await run_in_threadpool(make_assistant)
        papers = len(request.app.state.assistant.index.corpus)
        return {"added": [p.to_dict() for p in result.added],
                "duplicates": [p.to_dict() for p in result.duplicates], "papers": papers}

    @api.get("/papers/{paper_id}", response_model=PaperOut, responses=errors(404, 422, 503))
    async def paper(paper_id: str, ready=Depends(assistant)):
        found = ready.index.corpus.get(paper_id)
        if found is None:
            raise ApiError(404, "paper_not_found", f"no paper with id {paper_id!r}")
        return found.to_dict()

    @api.get("/metrics", include_in_schema=False)
    async def prometheus_metrics():
        return Response(metrics.render(), media_type=metrics.content_type)

    @api.get("/v1/models")
    async def models():
        return openai_compat.models(settings.model_id)

    @api.post("/v1/chat/completions",
              responses={200: {"content": {"text/event-stream": {}}, "description": "JSON, or SSE with stream=true"},
                         **errors(400, 413, 422, 429, 502, 503, 504)})
    async def chat_completions(body: openai_compat.ChatCompletionRequest, request: Request, ready=Depends(assistant)):
        if not body.stream:
            answer = await run_in_threadpool(ready.ask, body.question(), body.history())
            return openai_compat.completion(answer, settings.model_id)
        pieces = ready.stream(body.question(), body.history())
        return _event_stream(_chat_chunks(pieces, request, openai_compat.ChunkWriter(settings.model_id)))

    app.include_router(api)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    return app


def _event_stream(events) -> StreamingResponse:
    return StreamingResponse(events, media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


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


async def _ask_events(stream, request: Request):
    from rag.assistant import Answer

    try:
        async for piece in _pieces(stream, request):
            if isinstance(piece, Answer):
                yield _sse("citations", {"citations": [c.to_dict() for c in piece.citations]})
                yield _sse("done", piece.to_dict())
            else:
                yield _sse("token", {"text": piece})
    except RagError as exc:
        yield _sse("error", {"code": exc.code, "message": str(exc)})
    except Exception:  # headers are sent: end the stream with an error event, not a cut connection
        log.exception("unhandled error while streaming /ask")
        yield _sse("error", {"code": "internal_error", "message": "internal error; it has been logged"})


async def _chat_chunks(stream, request: Request, writer):
    from rag.assistant import Answer

    yield writer.start()
    try:
        async for piece in _pieces(stream, request):
            yield writer.finish(piece) if isinstance(piece, Answer) else writer.text(piece)
    except RagError as exc:
        yield writer.error(exc.code, str(exc))
    except Exception:  # the same for OpenAI-style streams
        log.exception("unhandled error while streaming /v1/chat/completions")
        yield writer.error("internal_error", "internal error; it has been logged")
    yield writer.done()
