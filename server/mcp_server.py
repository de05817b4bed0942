"""The service as a Model Context Protocol server, for agents (IDE assistants, desktop chat apps).

Built with the official `mcp` SDK: tools `search_papers`, `ask` and `get_paper`, the resource
template `paper://{paper_id}` and the listing `paper://list`. `rag mcp` serves it over stdio;
the HTTP service mounts its streamable HTTP transport at /mcp/, behind the API key. Tools
return the same JSON as /search, /ask and /papers/{id} and take the same `paper_ids` scope;
library errors reach the client as tool errors with their message.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable
from typing import Annotated, Any

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceNotFoundError, ToolError
from pydantic import Field

from rag.assistant import Assistant
from rag.common.errors import RagError
from rag.common.limits import MAX_K, MAX_QUESTION_CHARS

from .errors import error_response
from .schemas import BY_AUTHORS, SCOPE, Authors, PaperIds

Query = Annotated[
    str,
    Field(
        min_length=1,
        max_length=MAX_QUESTION_CHARS,
        description=f"Natural-language text, 1-{MAX_QUESTION_CHARS:,} characters.",
    ),
]
Scope = Annotated[PaperIds | None, Field(description=SCOPE)]
ByAuthors = Annotated[Authors | None, Field(description=BY_AUTHORS)]


def build_mcp(assistant: Callable[[], Assistant]) -> MCPServer:
    """`assistant()` returns the assistant to answer with, or raises RagError (e.g. still loading)."""
    server = MCPServer(
        "icml-rag",
        instructions="Search the ICML 2026 paper abstracts and answer questions about "
        "them with citations. Use search_papers to find papers, ask for a cited answer, get_paper "
        "for one abstract.",
    )

    async def call(work: Callable[[Assistant], Any]) -> Any:
        """Run blocking library work off the event loop; a library error becomes a tool error."""
        try:
            return await anyio.to_thread.run_sync(lambda: work(assistant()))
        except RagError as exc:
            raise ToolError(f"{exc.code}: {exc}") from exc

    @server.tool()
    async def search_papers(
        query: Query, k: Annotated[int, Field(ge=1, le=MAX_K)] = 5, paper_ids: Scope = None, authors: ByAuthors = None
    ) -> dict[str, Any]:
        """The k papers that best match the query, best first, each with its best-matching sentence;
        with paper_ids or authors, only among those papers."""
        result = await call(lambda ready: ready.retriever.within(paper_ids, authors).search(query, k))
        return {"results": [hit.to_dict() for hit in result.hits]}

    @server.tool()
    async def ask(question: Query, paper_ids: Scope = None, authors: ByAuthors = None) -> dict[str, Any]:
        """A short answer with numbered citations [n] to the papers it comes from, and its `confidence`:
        high (the cited papers support it), low (the closest papers; `missing` names the part of the
        question none of them contains) or none (an abstention: no abstract covers the question).
        With paper_ids or authors, only those papers are searched and cited."""
        answer = await call(lambda ready: ready.within(paper_ids, authors).ask(question, [], None))
        return answer.to_dict()

    def find(ready: Assistant, paper_id: str) -> dict[str, Any]:
        paper = ready.index.corpus.get(paper_id)
        if paper is None:
            raise LookupError(paper_id)
        return paper.public()

    @server.tool()
    async def get_paper(paper_id: str) -> dict[str, Any]:
        """One paper: its id, name, abstract, code link and seed files."""
        try:
            return await call(lambda ready: find(ready, paper_id))
        except LookupError:
            raise ToolError(f"no paper with id {paper_id!r}") from None

    @server.resource("paper://{paper_id}", mime_type="application/json", description="One paper's abstract")
    async def paper(paper_id: str) -> str:
        try:
            return json.dumps(await call(lambda ready: find(ready, paper_id)), ensure_ascii=False)
        except LookupError:
            raise ResourceNotFoundError(f"no paper with id {paper_id!r}") from None

    @server.resource(
        "paper://list", mime_type="application/json", name="papers", description="Every paper: id and name"
    )
    async def papers() -> str:
        listing = await call(
            lambda ready: [{"paper_id": p.paper_id, "name": p.display_name} for p in ready.index.corpus.papers]
        )
        return json.dumps(listing, ensure_ascii=False)

    return server


class BearerKey:
    """ASGI wrapper for the mounted transport: the service's API key, as on its other routes
    (a mounted app sits outside FastAPI's dependencies)."""

    def __init__(self, app, key: str | None):
        self.app, self.key = app, key

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and self.key:
            sent = dict(scope["headers"]).get(b"authorization", b"").strip()
            if not secrets.compare_digest(sent, f"Bearer {self.key}".encode()):
                denied = error_response(
                    401,
                    "unauthorized",
                    "this service needs `Authorization: Bearer <RAG_API_KEY>`",
                    {"WWW-Authenticate": "Bearer"},
                )
                return await denied(scope, receive, send)
        await self.app(scope, receive, send)
