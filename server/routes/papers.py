"""The corpus: list, read, and add papers."""

from __future__ import annotations

from fastapi import APIRouter, Depends
from fastapi.concurrency import run_in_threadpool

from ..dependencies import assistant, authorised, keeper
from ..errors import ApiError, errors
from ..keeper import AssistantKeeper
from ..schemas import AddPapersRequest, AddPapersResponse, PaperOut, PapersResponse

router = APIRouter(dependencies=[Depends(authorised)], responses=errors(401))


@router.get("/papers", response_model=PapersResponse, responses=errors(503))
async def papers(ready=Depends(assistant)):
    return {"papers": [p.public() for p in ready.index.corpus.papers]}


@router.post(
    "/papers",
    response_model=AddPapersResponse,
    status_code=201,
    dependencies=[Depends(assistant)],
    responses=errors(400, 413, 422, 503),
)
async def add_papers(body: AddPapersRequest, keeper: AssistantKeeper = Depends(keeper)):
    """Add abstracts without a full rebuild; searches meanwhile see the old index."""
    result = await run_in_threadpool(keeper.add, [(body.filename, body.content.encode())])
    corpus = keeper.get().index.corpus  # as indexed: an added paper's derived title is made there
    return {
        "added": [(corpus.get(p.paper_id) or p).public() for p in result.added],
        "duplicates": [(corpus.get(p.paper_id) or p).public() for p in result.duplicates],
        "papers": len(corpus),
    }


@router.get("/papers/{paper_id}", response_model=PaperOut, responses=errors(404, 422, 503))
async def paper(paper_id: str, ready=Depends(assistant)):
    found = ready.index.corpus.get(paper_id)
    if found is None:
        raise ApiError(404, "paper_not_found", f"no paper with id {paper_id!r}")
    return found.public()
