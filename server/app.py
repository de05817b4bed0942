"""FastAPI app: assembled here from its parts, each in its own file (errors, middleware,
dependencies, the keeper of the assistant, one router per resource). The index loads in the
background at start-up; routes call the library off the event loop."""

from __future__ import annotations

import threading
from contextlib import AsyncExitStack, asynccontextmanager

from asgi_correlation_id import CorrelationIdMiddleware
from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.staticfiles import StaticFiles
from mcp.server.mcpserver import MCPServer
from starlette.types import ASGIApp
from tqdm import tqdm

import rag
from rag.common.errors import ConfigError, RagError
from rag.common.parts import PARTS
from rag.common.settings import Settings, get_settings
from rag.feedback import FeedbackStore

from .errors import ApiError, error_response, install_handlers
from .keeper import AssistantKeeper
from .logs import claim_handlers, configure_logging, fatal
from .mcp_server import BearerKey, build_mcp
from .metrics import Metrics
from .middleware import LimitsAndLogging
from .probes import import_store_client, initial_states, probe_parts
from .routes import answers, explore, papers, service
from .routes import feedback as feedback_routes


def create_app(settings: Settings | None = None) -> FastAPI:
    if settings is None:
        try:
            settings = get_settings()
        except ConfigError as exc:  # uvicorn server.app:create_app --factory with a bad RAG_* variable
            fatal(str(exc))
            raise SystemExit(2) from None
    configure_logging(settings.service.log_format, settings.service.library_log_level)
    # bm25s tokenises through tqdm (bars off), whose default lock is a multiprocessing semaphore
    # that a worker leaves behind: the resource tracker would print "leaked semaphore" at shutdown.
    tqdm.set_lock(threading.RLock())
    PARTS.inject(settings.faults.fail_parts)
    initial_states(settings)
    in_flight = {"answers": 0}
    metrics = Metrics(in_flight)
    feedback = FeedbackStore(settings)
    keeper = AssistantKeeper(settings, metrics, feedback)

    def ready_assistant():
        """For MCP tools: the assistant, or a RagError that says why there is none yet."""
        try:
            return keeper.get()
        except ApiError as exc:
            raise RagError(exc.message) from None

    def with_mcp() -> tuple[MCPServer | None, ASGIApp]:
        built = build_mcp(ready_assistant)
        return built, built.streamable_http_app(streamable_http_path="/", host=settings.service.host)

    # MCP is an optional part: when it cannot be built, /mcp/ answers 503 and the rest serves.
    unavailable = error_response(503, "mcp_unavailable", "the MCP endpoint failed to start; see the service log")
    mcp, mcp_transport = PARTS.call("mcp", with_mcp, fallback=lambda: (None, unavailable))
    claim_handlers()  # the mcp SDK's logging.basicConfig, where it found the root without a handler

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        """The port opens at once: /health answers 503 "loading" until an index is loaded, and the
        parts the service talks to are probed behind it. The MCP transport's sessions live as long
        as the app (a mounted app's own lifespan never runs)."""
        import_store_client(settings)
        keeper.start()
        probe_parts(settings, feedback)
        async with AsyncExitStack() as stack:
            if mcp is not None:
                try:
                    await stack.enter_async_context(mcp.session_manager.run())
                except Exception as exc:
                    PARTS.failed("mcp", exc)
            yield

    app = FastAPI(
        title="icml-rag",
        version=rag.__version__,
        description="Questions about the ICML 2026 abstracts, answered with checked citations.",
        lifespan=lifespan,
    )
    app.state.settings, app.state.keeper, app.state.metrics, app.state.in_flight = settings, keeper, metrics, in_flight
    app.state.feedback = feedback

    app.add_middleware(
        LimitsAndLogging,
        max_body_bytes=settings.service.max_body_bytes,
        max_chat_body_bytes=settings.service.max_chat_body_bytes,
        max_answers=settings.service.max_answers_in_flight,
        in_flight=in_flight,
        metrics=metrics,
    )
    # Outermost: every log line of a request, the request line included, carries its id, and the
    # response echoes it in X-Request-ID (the caller's own id when it sends a valid one).
    app.add_middleware(CorrelationIdMiddleware, header_name="X-Request-ID")
    if settings.service.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.service.cors_origins,
            allow_methods=["GET", "POST"],
            allow_headers=["Authorization", "Content-Type"],
        )
    install_handlers(app, metrics.llm_errors)
    for router in (service.router, answers.router, papers.router, explore.router, feedback_routes.router):
        app.include_router(router)
    app.mount("/mcp", BearerKey(mcp_transport, settings.service.api_key))
    app.mount("/static", StaticFiles(directory=service.STATIC), name="static")
    return app
