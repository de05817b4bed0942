"""Request and response models of the HTTP contract (DESIGN.md)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, Field, StringConstraints

from rag.common.limits import (
    MAX_COMMENT_CHARS,
    MAX_HISTORY_TURNS,
    MAX_K,
    MAX_QUESTION_CHARS,
    MAX_SCOPE_PAPERS,
    MAX_TURN_CHARS,
)
from rag.query.analysis import AnswerType, Intent


def unicode_text(value: str) -> str:
    """JSON's "\\ud800" escapes decode to lone surrogates, which are not text: refuse them."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("must be valid Unicode text (no lone surrogates)") from None
    return value


def _trimmed(value: str) -> str:
    value = unicode_text(value).strip()
    if not value:
        raise ValueError("must not be empty")
    if len(value) > MAX_QUESTION_CHARS:
        raise ValueError(f"must be at most {MAX_QUESTION_CHARS} characters")
    return value


Question = Annotated[str, AfterValidator(_trimmed)]
"""1 to MAX_QUESTION_CHARS characters after trimming."""


PaperIds = list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=64)]]
"""A scope: paper ids; how many, and which, retrieval checks (`Retriever.within`: 422 and 404)."""
Authors = Annotated[
    list[Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]],
    Field(min_length=1, max_length=20),
]
"""An authors filter: names, any of which a paper's author list must hold (whole words, any case)."""
BY_AUTHORS = (
    "Only papers by any of these authors (1-20 names; whole words of a name, any case: 'Hinton') are searched and "
    "cited, where the corpus records authors; absent or null: every paper. No paper by them is a 404 saying so."
)
SCOPE = (
    f"Only these papers (1-{MAX_SCOPE_PAPERS} ids) are searched and cited; absent or null: every paper. "
    "An unknown id is a 404 naming it."
)


class SearchRequest(BaseModel):
    query: Question = Field(
        ..., description="What to look for.", examples=["rotary embeddings for vision transformers"]
    )
    k: int = Field(5, ge=1, le=MAX_K, description="Number of papers to return.")
    paper_ids: PaperIds | None = Field(None, description=SCOPE, examples=[["22b01627a253", "7c27a288c0e5"]])
    authors: Authors | None = Field(None, description=BY_AUTHORS, examples=[["Ada Lovelace"]])


class SearchResult(BaseModel):
    paper_id: str
    rank: int
    score: float
    dense_score: float
    name: str
    text: str
    code_url: str | None
    snippet: str


class SearchResponse(BaseModel):
    results: list[SearchResult]


class Health(BaseModel):
    status: str
    papers: int
    chunks: int
    embedding_model: str
    store: str = Field(
        ..., description="Where the index is: faiss (files of this machine) or milvus (a shared collection)."
    )
    generator: str
    answers_in_flight: int = Field(..., description="Answers being served now (bounded by RAG_MAX_ANSWERS_IN_FLIGHT).")
    catching_up: bool = Field(
        False,
        description="The index is being brought in line with the seed folder; the last good build serves meanwhile.",
    )
    pending_papers: int = Field(
        0, description="Papers the seed folder has and the served build lacks, or the reverse, while catching up."
    )
    parts: dict[str, str] = Field(
        default_factory=dict,
        description="Each part's state: llm, feedback, store (probed at start, then as used), metrics, "
        "suggestions, mcp: ok, off, unknown (not probed yet), unreachable (at start) or failing (in use). "
        "A part that fails never fails an answer.",
    )


class Liveness(BaseModel):
    status: str = Field(..., description="Always 'alive' while the process answers.")


class Turn(BaseModel):
    role: str = Field(..., pattern="^(user|assistant)$")
    content: str = Field(..., max_length=MAX_TURN_CHARS)


class AskRequest(BaseModel):
    question: Question = Field(..., examples=["What speedup does Jacobi Forcing report?"])
    history: list[Turn] = Field(
        default_factory=list, max_length=MAX_HISTORY_TURNS, description="Earlier turns, oldest first."
    )
    k: int = Field(5, ge=1, le=MAX_K)
    stream: bool = Field(False, description="Answer as a text/event-stream of token, citations, done events.")
    paper_ids: PaperIds | None = Field(None, description=SCOPE, examples=[["22b01627a253", "7c27a288c0e5"]])
    authors: Authors | None = Field(None, description=BY_AUTHORS, examples=[["Ada Lovelace"]])


class CitationOut(BaseModel):
    n: int
    paper_id: str
    name: str
    text: str
    snippet: str
    code_url: str | None = None
    authors: list[str] | None = Field(None, description="Where the corpus records authors.")


class NamedPaperOut(BaseModel):
    paper_id: str
    name: str


class FactOut(BaseModel):
    text: str = Field(description="One part of the question, as asked.")
    type: AnswerType = Field(description="The answer it expects.")


class AskAnalysisOut(BaseModel):
    """What the question asks, as the service understood it (rag/query/analysis.py)."""

    intent: Intent
    named: list[NamedPaperOut] = Field(description="The papers the question (or the conversation) names.")
    facts: list[FactOut] = Field(description="One per part of the question, in the order asked.")
    constraints: list[str] = Field(description="The phrases saying what it is about; never an intent word.")


class AskResponse(BaseModel):
    answer_id: str = Field(description="Names this answer for POST /feedback.")
    answer: str
    citations: list[CitationOut]
    abstained: bool
    confidence: Literal["high", "low", "none"] = Field(
        description="high: the cited papers support what the question asks; low: they are the closest papers, but "
        "`missing` (a phrase of the question) is in none of them, as the answer's first sentence says; none: abstained."
    )
    missing: str | None = Field(None, description="The part of the question no cited abstract contains (low answers).")
    query: str
    generator: str
    fallback: bool
    timings: dict[str, float]
    suggestions: list[str] = Field(description="Questions to ask next about the cited papers.")
    ask: AskAnalysisOut | None = Field(None, description="What the question asks: intent, named papers, facts.")


class FeedbackRequest(BaseModel):
    answer_id: str = Field(..., min_length=1, max_length=64, description="The `answer_id` of an answer.")
    rating: Literal["up", "down"]
    comment: Annotated[str, AfterValidator(unicode_text)] | None = Field(
        None, max_length=MAX_COMMENT_CHARS, description="What was right or wrong with it."
    )


class FeedbackResponse(BaseModel):
    answer_id: str
    rating: Literal["up", "down"]
    comment: str | None
    rated_at: str


class PaperOut(BaseModel):
    paper_id: str
    name: str = Field(description="The title, else the name the abstract gives, else a short derived title.")
    text: str
    code_url: str | None
    sources: list[str]
    title: str | None = Field(None, description="Where the corpus has titles.")
    authors: list[str] | None = Field(None, description="Where the corpus has authors.")
    url: str | None = None
    ref: str | None = Field(None, description="The corpus's own id for the paper (OpenReview, arXiv).")


class PapersResponse(BaseModel):
    papers: list[PaperOut]


class AddPapersRequest(BaseModel):
    filename: str = Field(
        ...,
        min_length=1,
        max_length=200,
        description="Its suffix names the format: .txt (seed format), .jsonl, .csv, .json (OpenReview's notes, "
        "arXiv's records), .xml (the arXiv API's Atom feed); any other name is read as seed format.",
        examples=["new-abstracts.txt"],
    )
    content: str = Field(
        ...,
        min_length=1,
        description="The file: in seed format a header line, then abstracts separated by blank lines; JSON Lines "
        "and CSV with an abstract and any of title, authors, url, id. Text shorter than an abstract "
        "(RAG_MIN_ABSTRACT_WORDS) is refused.",
        examples=[
            "My new papers\n\nWe propose Lattice Pockets, a protein pocket generator that places a lattice prior "
            "over binding sites and samples ligand-aware geometries with a diffusion model. On three docking "
            "benchmarks it finds pockets closer to crystal structures than prior generators, at a tenth of their cost."
        ],
    )


class AddPapersResponse(BaseModel):
    added: list[PaperOut]
    duplicates: list[PaperOut]
    papers: int


class ErrorDetail(BaseModel):
    code: str
    message: str


class ErrorResponse(BaseModel):
    """The body of every 4xx and 5xx answer."""

    error: ErrorDetail


class MapPaper(BaseModel):
    paper_id: str
    name: str
    x: float = Field(..., ge=0, le=1, description="Place on the map, 0 to 1 (left to right).")
    y: float = Field(..., ge=0, le=1, description="Place on the map, 0 to 1 (bottom to top).")
    topic: int = Field(..., description="The `id` of its topic.")


class MapTopic(BaseModel):
    id: int
    label: str = Field(..., description="Its three most distinctive words and phrases (class-based TF-IDF).")
    words: list[str] = Field(..., description="Its most distinctive words, the most distinctive first.")
    size: int = Field(..., description="Papers in it.")
    other: bool = Field(
        False, description="The papers no topic fits (labelled 'other subjects', no words); the last topic when there."
    )


class MapResponse(BaseModel):
    papers: list[MapPaper]
    topics: list[MapTopic]


class SentencePair(BaseModel):
    asked: str = Field(..., description="The sentence of the paper asked about...")
    similar: str = Field(..., description="...and the sentence of the similar paper closest to it.")
    score: float = Field(..., description="Their cosine.")


class SimilarPaper(BaseModel):
    paper_id: str
    name: str
    code_url: str | None
    topic: int | None
    score: float = Field(..., description="Cosine of the two papers' vectors (the means of their sentence vectors).")
    pair: SentencePair = Field(..., description="The pair of sentences that ties the two abstracts.")


class SimilarResponse(BaseModel):
    paper_id: str
    similar: list[SimilarPaper]
