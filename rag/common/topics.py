"""The map's settings group (rag/common/settings.py puts the groups together; the others are in
groups.py): the map of the papers and their topics, computed when indexing."""

from typing import ClassVar

from pydantic import BaseModel, Field


class MapSettings(BaseModel):
    """The map of the papers and their topics (rag/index/topics.py), computed when indexing.
    Env: RAG_MAP_<NAME>."""

    flat_prefix: ClassVar[str] = "map_"

    topics: int = Field(
        0,
        ge=0,
        le=1000,
        description="Topics the papers are clustered into (by their vectors), before those no topic fits are set "
        "apart; 0: the count between sqrt(n/2) and 3*sqrt(n) for n papers, at most map_max_topics, whose topics are "
        "best separated (silhouette on cosine).",
    )
    topic_min_fit: float = Field(
        0.1,
        ge=0,
        le=1,
        description="How well a topic's papers must fit it on average (their simplified silhouette: 0 as near "
        "another topic as their own) for it to be named; the papers of a topic that fits less, and each paper "
        "nearer another topic than its own, make the topic 'other subjects'. On the 86 seeds 0.1 to 0.12 named "
        "the same 17 topics (docs/evaluation.md).",
    )
    max_topics: int = Field(100, ge=1, le=1000, description="The most topics that 0 (automatic) gives.")
    topic_candidates: int = Field(
        12, ge=1, le=50, description="Topic counts map_topics=0 tries, spread evenly over its range."
    )
    agglomerative_up_to: int = Field(
        5_000,
        ge=2,
        le=20_000,
        description="Papers up to which topics are Ward's agglomerative clustering of the vectors (its time and "
        "memory grow with the square of the papers: 8 to 11 s and 0.3 GB at 5,000, with the silhouettes); above, "
        "FAISS's spherical k-means (100,000 papers: 18 s, 0.3 GB).",
    )
    silhouette_sample: int = Field(
        5_000,
        ge=100,
        le=50_000,
        description="Papers (a seeded sample) on which a topic count's silhouette is measured: its cost grows with "
        "the square of this.",
    )
    umap_above: int = Field(
        3_000,
        ge=4,
        description="Papers from which the map is laid out by UMAP rather than t-SNE (slower to grow, but a few "
        "seconds of compiling in every new process).",
    )
    neighbours: int = Field(
        15,
        ge=2,
        le=200,
        description="UMAP's neighbourhood (larger: more of the global structure kept on the map), and the nearest "
        "papers among which an added paper is placed.",
    )
    min_dist: float = Field(0.1, ge=0, le=1, description="How tightly UMAP packs close papers on the map.")
    seed: int = Field(
        0,
        ge=0,
        description="Seeds t-SNE, UMAP, k-means and the silhouette's sample: a build of the same papers, the same map.",
    )
    kmeans_inits: int = Field(
        4,
        ge=1,
        le=50,
        description="Starts of the spherical k-means of the topics (above map_agglomerative_up_to papers); the best "
        "(highest similarity to the centroids) is kept.",
    )
    label_max_df: float = Field(
        0.1,
        gt=0,
        le=1,
        description="Words in more than this share of the abstracts ('propose', 'method') never label a topic.",
    )
    label_words: int = Field(
        8, ge=3, le=30, description="Distinctive words and phrases kept per topic; the label is the first three."
    )
    label_longest: int = Field(3, ge=1, le=5, description="The most words in a phrase that labels a topic.")
    label_phrase_share: float = Field(
        0.5,
        gt=0,
        le=1,
        description="A word labels a topic as the longer phrase holding it when that phrase makes at least this "
        "share of the word's uses in the topic ('kv cache' rather than 'kv').",
    )
