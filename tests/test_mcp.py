"""The MCP server, driven by the official SDK's own client over both transports: `rag mcp` on
stdio, and streamable HTTP at /mcp/ on a real uvicorn, behind the API key."""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading

import httpx
import httpx2
import pytest
from mcp import ClientSession, MCPError, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from .conftest import API_KEY, ROOT, index_env

MEDSCOPE, SPIRAL = "22b01627a253", "c9f6ac55caba"  # MedScope, Spiral RoPE


def run_in_thread(main) -> None:
    """asyncio.run in a thread of its own: another test's library may have left an event loop
    running in this one."""
    failure = []

    def target():
        try:
            asyncio.run(main())
        except BaseException as exc:  # re-raised below, in the test's thread
            failure.append(exc)

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(timeout=300)
    assert not thread.is_alive(), "the MCP exchange did not finish"
    if failure:
        raise failure[0]


async def exercise(session: ClientSession) -> None:
    """What an agent does: discover, search, ask, read; and the errors it can get."""
    await session.initialize()
    assert {t.name for t in (await session.list_tools()).tools} == {"search_papers", "ask", "get_paper"}

    found = await session.call_tool("search_papers", {"query": "rotary embeddings for vision transformers", "k": 3})
    results = found.structured_content["results"]
    assert not found.is_error and len(results) == 3 and results[0]["name"] == "Spiral RoPE"

    answer = (
        await session.call_tool("ask", {"question": "What speedup does Jacobi Forcing report?"})
    ).structured_content
    assert "3.8" in answer["answer"] and "[1]" in answer["answer"] and not answer["abstained"]
    assert answer["confidence"] == "high"
    assert answer["citations"][0]["name"] == "Jacobi Forcing"

    # scoped: only the chosen papers are searched and cited; the unscoped answer cites others too
    medical = {"question": "Which papers build medical benchmarks?"}
    everywhere = (await session.call_tool("ask", medical)).structured_content
    assert {c["paper_id"] for c in everywhere["citations"]} - {MEDSCOPE}
    scoped = (await session.call_tool("ask", {**medical, "paper_ids": [MEDSCOPE]})).structured_content
    assert [c["paper_id"] for c in scoped["citations"]] == [MEDSCOPE] and scoped["confidence"] == "high"
    within = await session.call_tool("search_papers", {"query": "medical benchmarks", "paper_ids": [MEDSCOPE, SPIRAL]})
    assert [r["paper_id"] for r in within.structured_content["results"]] == [MEDSCOPE, SPIRAL]
    unknown = await session.call_tool("ask", {**medical, "paper_ids": [MEDSCOPE, "000000000000"]})
    assert unknown.is_error and "paper_not_found: no paper with id '000000000000'" in unknown.content[0].text
    empty = await session.call_tool("search_papers", {"query": "rope", "paper_ids": []})
    assert empty.is_error and "must name at least one paper" in empty.content[0].text

    paper_id = results[0]["paper_id"]
    paper = (await session.call_tool("get_paper", {"paper_id": paper_id})).structured_content
    assert paper["name"] == "Spiral RoPE" and paper["text"].startswith(results[0]["text"][:40])
    missing = await session.call_tool("get_paper", {"paper_id": "000000000000"})
    assert missing.is_error and "no paper with id '000000000000'" in missing.content[0].text
    bad_k = await session.call_tool("search_papers", {"query": "rope", "k": 500})
    assert bad_k.is_error and "50" in bad_k.content[0].text

    templates = (await session.list_resource_templates()).resource_templates
    assert [t.uri_template for t in templates] == ["paper://{paper_id}"]
    read = await session.read_resource(f"paper://{paper_id}")
    assert json.loads(read.contents[0].text)["name"] == "Spiral RoPE"
    listing = json.loads((await session.read_resource("paper://list")).contents[0].text)
    assert len(listing) == 86 and {"paper_id": paper_id, "name": "Spiral RoPE"} in listing
    with pytest.raises(MCPError, match="no paper with id"):
        await session.read_resource("paper://000000000000")


def test_rag_mcp_over_stdio(index_dir):
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "server.cli", "mcp"],
        cwd=str(ROOT),
        env={**os.environ, **index_env(index_dir)},
    )

    async def run():
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await exercise(session)

    run_in_thread(run)


def test_mcp_over_streamable_http_behind_the_api_key(keyed_server):
    url = f"{keyed_server.url}/mcp/"

    async def run():
        headers = {"Authorization": f"Bearer {API_KEY}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await exercise(session)

    run_in_thread(run)
    initialize = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    for headers in ({}, {"Authorization": "Bearer wrong"}):
        denied = httpx.post(url, json=initialize, headers=headers)
        assert denied.status_code == 401 and denied.json()["error"]["code"] == "unauthorized"
