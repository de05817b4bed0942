"""A map of the papers and their topics, computed when indexing from the vectors the index holds.

Each paper gets a place on a 2-D map (t-SNE or UMAP of its vector, scaled into [0, 1]) and a topic
(a clustering of the vectors themselves, not of the places: a topic is a subject, wherever the
projection puts its papers); each topic a label of the words and phrases several of its papers use
and few others do (a class-based TF-IDF over scikit-learn's CountVectorizer, without research
boilerplate). The papers that fit no topic (no sibling subject in the corpus) are set apart in a
last topic, "other subjects", rather than mixed into the others. A paper's vector is the mean of
its sentences' vectors, so both stores compute it from what they store (`paper_vectors`). Every
step is seeded: a build of the same papers gives the same map.

A build fits the whole map (`fit_map`). A catch-up or an add keeps every other paper where it was
and places each new paper among its nearest papers, which the store finds (`place`): at their
similarity-weighted mean position, in the topic most of their similarity falls in ("other
subjects" too). Labels stay as fitted until the next full build.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from rag.common.settings import Settings
    from rag.index.corpus import Paper


@dataclass(frozen=True)
class Topic:
    id: int
    label: str  # its three most distinctive words or phrases; OTHER_LABEL for the papers no topic fits
    words: list[str]  # the most distinctive first
    other: bool = False  # the papers set apart: no topic fits them (`topics_of`); the last topic when there


OTHER_LABEL = "other subjects"  # the label of the papers no topic fits (`topics_of`)


@dataclass(frozen=True)
class Place:
    x: float
    y: float
    topic: int


@dataclass
class TopicMap:
    """Every paper's place, by paper id, and the topics."""

    places: dict[str, Place]
    topics: list[Topic]

    @classmethod
    def empty(cls) -> TopicMap:
        return cls({}, [])

    def sizes(self) -> Counter[int]:
        return Counter(place.topic for place in self.places.values())

    def of(self, paper_ids: Iterable[str], placed: Mapping[str, Place] | None = None) -> TopicMap:
        """The map of `paper_ids` (in that order): their places here or in `placed`, the same topics."""
        known = {**self.places, **(placed or {})}
        return TopicMap({pid: known[pid] for pid in paper_ids}, self.topics)

    def to_dict(self, order: list[str]) -> dict:
        """Columns in the order of `order` (a build's paper order), for a store to keep."""
        rows = [self.places[pid] for pid in order]
        return {
            "topics": [asdict(t) for t in self.topics],
            "x": [p.x for p in rows],
            "y": [p.y for p in rows],
            "topic": [p.topic for p in rows],
        }

    @classmethod
    def from_dict(cls, stored: dict, order: list[str]) -> TopicMap:
        if not len(stored["x"]) == len(stored["y"]) == len(stored["topic"]) == len(order):
            raise ValueError(f"a map of {len(stored['x'])} papers for {len(order)} papers")
        places = {
            pid: Place(float(x), float(y), int(t))
            for pid, x, y, t in zip(order, stored["x"], stored["y"], stored["topic"], strict=True)
        }
        return cls(places, [Topic(**t) for t in stored["topics"]])

    def save(self, path: Path, order: list[str]) -> None:
        path.write_text(json.dumps(self.to_dict(order), separators=(",", ":")))

    @classmethod
    def load(cls, path: Path, order: list[str]) -> TopicMap:
        return cls.from_dict(json.loads(path.read_text()), order)


def paper_vectors(sentence_vectors: np.ndarray, counts: list[int]) -> np.ndarray:
    """Each paper's vector: the normalised mean of its sentences' vectors (`counts[i]` rows are
    paper i's, in order); a paper without sentences gets zeros."""
    dimensions = sentence_vectors.shape[1] if sentence_vectors.ndim == 2 else 0
    out = np.zeros((len(counts), dimensions), np.float32)
    start = 0
    for i, count in enumerate(counts):
        if count:
            out[i] = np.asarray(sentence_vectors[start : start + count], np.float32).mean(axis=0)
        start += count
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    return out / np.where(norms > 0, norms, 1)


def topic_counts(papers: int, settings: Settings) -> list[int]:
    """The numbers of topics to choose from: `map_topics`, or up to `map_topic_candidates` counts
    spread evenly over [sqrt(n/2), 3 sqrt(n)] for n papers, at most `map_max_topics` and fewer than
    the papers (a silhouette needs a topic of two papers somewhere). The top is high because the
    papers no topic fits are set apart (`topics_of`): a finer count splits subjects apart rather
    than gathering unrelated papers."""
    if settings.map.topics:
        return [max(1, min(settings.map.topics, papers))]
    high = min(math.floor(3 * math.sqrt(papers)), settings.map.max_topics, papers - 1)
    if high < 2:
        return [1]
    low = min(max(2, math.ceil(math.sqrt(papers / 2))), high)
    spread = np.linspace(low, high, min(settings.map.topic_candidates, high - low + 1))
    return sorted({int(round(k)) for k in spread})


def fit_map(papers: list[Paper], vectors: np.ndarray, settings: Settings) -> TopicMap:
    """The whole map of `papers` (row i of `vectors` is paper i's vector); the papers no topic fits
    make the last topic, labelled OTHER_LABEL."""
    if not papers:
        return TopicMap.empty()
    xy = _layout(vectors, settings)
    labels = topics_of(vectors, settings)
    named = int(labels.max()) + 1
    topics = _labels([p.text for p in papers], labels, named, settings)
    if (labels < 0).any():
        labels = np.where(labels < 0, named, labels)
        topics.append(Topic(named, OTHER_LABEL, [], other=True))
    places = {
        p.paper_id: Place(round(float(x), 5), round(float(y), 5), int(t))
        for p, (x, y), t in zip(papers, xy, labels, strict=True)
    }
    return TopicMap(places, topics)


def topics_of(vectors: np.ndarray, settings: Settings) -> np.ndarray:
    """Each paper's topic (0 the largest), or -1 for a paper no topic fits, clustering the papers'
    vectors less their mean (what every abstract shares, 'we propose a model that...', would
    otherwise weigh on every distance), made unit again. Up to `map_agglomerative_up_to` papers,
    Ward's agglomerative clustering (one tree, cut at each candidate count; on the 86 seeds it kept
    subjects together that k-means of the 2-D places split or mixed); above, FAISS's spherical
    k-means, whose cost grows linearly. Clustering puts every paper somewhere, and a paper without
    a sibling subject in the corpus then makes a topic of unrelated papers: `_set_apart` takes out
    the papers and topics that do not fit. Of the `topic_counts`, the one whose topics so kept are
    best separated (silhouette on cosine, on a seeded sample of at most `map_silhouette_sample`
    papers, a paper set apart counting 0); the fewer topics on a tie."""
    n = len(vectors)
    counts = topic_counts(n, settings)
    if counts == [1]:
        return np.zeros(n, np.int64)
    vectors = np.asarray(vectors, np.float32)
    unit = vectors - vectors.mean(axis=0)
    unit /= np.maximum(np.linalg.norm(unit, axis=1, keepdims=True), 1e-12)
    if n <= settings.map.agglomerative_up_to:
        from scipy.cluster.hierarchy import fcluster, linkage

        tree = linkage(unit, "ward")
        clusters = [fcluster(tree, k, "maxclust") - 1 for k in counts]
    else:
        clusters = [_spherical_kmeans(unit, k, settings) for k in counts]
    candidates = [_set_apart(unit, labels, settings) for labels in clusters]
    # argmax takes the first best: the fewer topics
    best = (
        candidates[int(np.argmax(_separations(unit, candidates, settings)))] if len(candidates) > 1 else candidates[0]
    )
    # numbered by size, largest first (the page gives the first ten its most distinct colours)
    kept = best >= 0
    found, labels, sizes = np.unique(best[kept], return_inverse=True, return_counts=True)
    rank = np.empty(len(found), np.int64)
    rank[np.argsort(-sizes, kind="stable")] = np.arange(len(found))
    out = np.full(n, -1, np.int64)
    out[kept] = rank[labels.ravel()]
    return out


def _fits(unit: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """How well each paper fits its topic: its simplified silhouette on cosine, (b - a) / max(a, b)
    with a its distance to the mean of its topic's other papers and b to the nearest other topic's
    mean; -1 alone in its topic. The means, not every pair as in scikit-learn's
    `silhouette_samples`: hand-written, so that it costs papers x topics at any corpus size, from
    one product of the papers with their topics' sums, a block of papers at a time."""
    from scipy.sparse import csr_array

    n, k = len(unit), int(labels.max()) + 1
    sizes = np.bincount(labels, minlength=k)
    if (sizes > 0).sum() < 2:
        return np.zeros(n)  # one topic: nothing to be nearer to
    sums = csr_array((np.ones(n, np.float32), (labels, np.arange(n))), shape=(k, n)) @ unit
    lengths = np.linalg.norm(sums, axis=1)
    fits = np.empty(n)
    for start in range(0, n, 10_000):
        block = slice(start, start + 10_000)
        dots = unit[block] @ sums.T  # each paper with each topic's sum
        rows, own = np.arange(len(dots)), labels[block]
        # the paper's own topic less itself (unit vectors: |sum - x|^2 = |sum|^2 - 2 x.sum + 1)
        others = np.sqrt(np.maximum(lengths[own] ** 2 - 2 * dots[rows, own] + 1, 1e-12))
        a = 1 - (dots[rows, own] - 1) / others
        cosines = dots / np.maximum(lengths, 1e-12)
        cosines[:, sizes == 0] = -np.inf  # a k-means centroid that no paper chose
        cosines[rows, own] = -np.inf
        b = 1 - cosines.max(axis=1)
        fits[block] = (b - a) / np.maximum(np.maximum(a, b), 1e-12)
    return np.where(sizes[labels] > 1, fits, -1.0)


def _set_apart(unit: np.ndarray, labels: np.ndarray, settings: Settings) -> np.ndarray:
    """`labels` less the papers no topic fits (-1): a paper nearer another topic than its own
    (`_fits` below 0), then a topic left with one paper or whose papers fit it less than
    `map_topic_min_fit` on average (unrelated papers that clustering had to put somewhere)."""
    fits = _fits(unit, labels)
    kept = fits >= 0
    k = int(labels.max()) + 1
    sizes = np.bincount(labels[kept], minlength=k)
    mean_fit = np.bincount(labels[kept], weights=fits[kept], minlength=k) / np.maximum(sizes, 1)
    kept &= ((sizes > 1) & (mean_fit >= settings.map.topic_min_fit))[labels]
    return np.where(kept, labels, -1)


def _layout(vectors: np.ndarray, settings: Settings) -> np.ndarray:
    """2-D positions scaled into [0, 1], on cosine distance, seeded. Below `map_umap_above` papers
    scikit-learn's t-SNE (86 seeds: 0.6 s, trustworthiness 0.89 at 5 neighbours against UMAP's
    0.83); from there UMAP, whose cost grows more slowly (100,000 papers: 77 s) but whose numba
    code compiles for about 7 s in every new process (seeded, hence on one core)."""
    n = len(vectors)
    if n < 4:
        xy = np.eye(max(n, 2))[:n, :2]  # apart, whatever their vectors: nothing to lay out
    elif n < settings.map.umap_above:
        from sklearn.manifold import TSNE

        # scikit-learn's default perplexity, below the number of other papers for tiny corpora
        perplexity = min(30.0, (n - 1) / 3)
        xy = TSNE(2, perplexity=perplexity, metric="cosine", init="pca", random_state=settings.map.seed).fit_transform(
            vectors
        )
    else:
        import umap

        xy = umap.UMAP(
            n_neighbors=settings.map.neighbours,
            min_dist=settings.map.min_dist,
            metric="cosine",
            random_state=settings.map.seed,
            n_jobs=1,  # what a seed implies anyway; said here so UMAP does not warn about it
        ).fit_transform(vectors)
    low, high = xy.min(axis=0), xy.max(axis=0)
    return (xy - low) / np.where(high > low, high - low, 1)


def _spherical_kmeans(unit: np.ndarray, k: int, settings: Settings) -> np.ndarray:
    """FAISS k-means on the unit sphere (centroids made unit at each step), seeded; the best of
    `map_kmeans_inits` starts. It trains on at most 256 papers a topic (FAISS's sample) and then
    assigns every paper to its nearest centroid."""
    import faiss

    data = np.ascontiguousarray(unit, np.float32)
    kmeans = faiss.Kmeans(
        data.shape[1], k, niter=20, nredo=settings.map.kmeans_inits, spherical=True, seed=settings.map.seed
    )
    kmeans.train(data)
    _, nearest = kmeans.index.search(data, 1)
    return nearest.ravel()


def _separations(unit: np.ndarray, candidates: list[np.ndarray], settings: Settings) -> list[float]:
    """Each clustering's silhouette on cosine distance (how much nearer each paper is to its own
    topic than to the next) over its kept papers, each paper set apart counting 0, as a paper alone
    does in a silhouette (-1 for fewer than two topics kept); all on one seeded sample of at most
    `map_silhouette_sample` papers whose distances are computed once."""
    from sklearn.metrics import pairwise_distances, silhouette_samples

    n = len(unit)
    rng = np.random.default_rng(settings.map.seed)
    sample = (
        np.sort(rng.choice(n, settings.map.silhouette_sample, replace=False))
        if n > settings.map.silhouette_sample
        else np.arange(n)
    )
    distances = pairwise_distances(unit[sample], metric="cosine")
    np.fill_diagonal(distances, 0)  # rounding leaves about 1e-7 there; a precomputed silhouette wants zeros
    separations = []
    for labels in candidates:
        kept = np.flatnonzero(labels[sample] >= 0)
        topics = len(np.unique(labels[sample][kept]))
        if 1 < topics < len(kept):
            within = distances[np.ix_(kept, kept)]
            separations.append(
                float(silhouette_samples(within, labels[sample][kept], metric="precomputed").sum() / len(sample))
            )
        else:
            separations.append(-1.0)
    return separations


# Research boilerplate that any abstract may use whatever its topic ("we propose a novel method
# that significantly outperforms..."): with English stopwords, adverbs and numbers, these words
# cut a text into the runs that label phrases are taken from, and never sit in one.
GENERIC_WORDS = frozenset(
    """propose proposed proposes proposing present presents presented introduce introduces introduced novel new
    existing show shows shown showing demonstrate demonstrates demonstrated achieve achieves achieved achieving
    improve improves improved improving improvement improvements enable enables enabling outperform outperforms
    outperforming extensive effective efficient various several different diverse key main strong simple
    paper papers work works study studies method methods approach approaches framework frameworks technique
    techniques result results performance state-of-the-art sota baseline baselines experiment experiments
    experimental empirical evaluate evaluated evaluating evaluation evaluations task tasks problem problems setting
    settings design designed leverage leverages leveraging address addresses addressing remain remains challenge
    challenges challenging despite recent prior previous current based using use used uses able ability allow
    allows including include includes particular code available open-source github https http www times fold
    real real-world zero core cause causes caused prevent prevents derive derives derived compare compared
    compares rigorous vulnerable wide range gain gains consistent substantial large small high low better best
    good general make makes made reduce reduces reduced reducing increase increases increased obtain obtains
    provide provides provided require requires required requiring capture captures captured theoretical
    effectiveness superior competitive limited limitation limitations fundamental critical crucial important
    success successful learn learns learned enhance enhances enhanced enhancing scenario scenarios practical
    practice underlying unified lead leads leading exhibit exhibits identify identifies reveal reveals revealing
    find finds found suggest suggests across via within without first second third one two three""".split()
)
# What every paper has: these may end a phrase ("language models", "medical benchmarks") but
# neither start one nor label a topic alone.
GENERIC_NOUNS = frozenset("model models data dataset datasets benchmark benchmarks learning training".split())
# A word that reads as an adjective by its ending ('adversarial', 'stochastic', 'generative').
_ADJECTIVE = re.compile(r"^[\w-]+(al|ic|ive|ous|ful|able|ible)$")
_TOKEN = re.compile(r"[^\W\d_][\w]*(?:-\w+)*|[^\w\s]|\d\S*")


def _label_terms(text: str, stopwords: frozenset[str], longest: int, seen: dict[str, Counter[str]], stem) -> list[str]:
    """The candidate label terms of `text`, Snowball-stemmed ("diffus languag model"): its words
    and phrases of up to `longest` words inside runs that stopwords, generic words, adverbs,
    numbers and punctuation cut, not starting with a generic noun. `seen` counts each term's
    written forms; a label shows the commonest in its topic's papers. Hand-written: CountVectorizer's n-grams
    bridge the stopwords it removes ("reduction of memory" -> "reduction memory")."""
    runs: list[list[str]] = [[]]
    for token in _TOKEN.findall(text):
        word = token.lower()
        if not word[0].isalpha() or len(word) < 2 or word in stopwords or word.endswith("ly"):
            runs.append([])
        else:
            runs[-1].append(word)
    terms = []
    for run in runs:
        stemmed = stem(run)
        for n in range(1, longest + 1):
            for i in range(len(run) - n + 1):
                if run[i] in GENERIC_NOUNS:
                    continue
                key = " ".join(stemmed[i : i + n])
                seen.setdefault(key, Counter())[" ".join(run[i : i + n])] += 1
                terms.append(key)
    return terms


def _labels(texts: list[str], labels: np.ndarray, k: int, settings: Settings) -> list[Topic]:
    """Each topic's words and phrases that several of its papers use and few others do: a term's
    uses per paper of the topic times its share of the papers using it that are in the topic (a
    class-based TF-IDF, as BERTopic's c-TF-IDF); terms of one paper of a topic only when the topic
    has too few others. A word is shown as the longer phrase holding it that makes at least
    `map_label_phrase_share` of its uses in the topic ('kv' as 'kv cache'), an adjective as any
    such phrase. Terms in more than `map_label_max_df` of the abstracts, or in one paper alone, are
    left out, and a term sharing a word with a better one (MMR's diversity, on words) too."""
    import Stemmer
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS, CountVectorizer

    seen: dict[str, Counter[str]] = {}
    stopwords = frozenset(ENGLISH_STOP_WORDS) | GENERIC_WORDS
    stem = Stemmer.Stemmer("english").stemWords
    vectorizer = CountVectorizer(
        analyzer=lambda text: _label_terms(text, stopwords, settings.map.label_longest, seen, stem),
        min_df=2 if len(texts) > 2 else 1,  # a term of one paper alone labels no topic
        max_df=settings.map.label_max_df if len(texts) * settings.map.label_max_df >= 2 else 1.0,
    )
    try:
        counts = vectorizer.fit_transform(texts)
    except ValueError:  # no term is left (a corpus of a paper or two)
        return [Topic(t, f"topic {t + 1}", []) for t in range(k)]
    terms = vectorizer.get_feature_names_out()
    used_by = counts > 0
    papers = np.asarray(used_by.sum(axis=0)).ravel()
    topics = []
    for t in range(k):
        members = labels == t
        in_topic = np.asarray(used_by[members].sum(axis=0)).ravel()
        uses = np.asarray(counts[members].sum(axis=0)).ravel()
        scores = uses / max(members.sum(), 1) * in_topic / (papers + 1)
        several = in_topic >= min(2, members.sum())
        phrases = [j for j in np.flatnonzero(several) if " " in terms[j]]
        best: list[str] = []  # the chosen terms, as stemmed keys
        for i in np.lexsort((-scores, ~several)):  # several of its papers first, then by score
            if scores[i] <= 0 or len(best) == settings.map.label_words:
                break
            # an adjective says little alone ('adversarial'): any phrase holding it is better
            adjective = _ADJECTIVE.search(seen[terms[i]].most_common(1)[0][0])
            wanted = 0 if adjective else settings.map.label_phrase_share * uses[i]
            longer = [j for j in phrases if f" {terms[i]} " in f" {terms[j]} " and uses[j] >= wanted]
            chosen = max(longer, key=lambda j: (uses[j], len(terms[j])), default=i)
            _merge(best, terms[chosen], replaces=bool(several[chosen]))
        written = " ".join(text.lower() for text, member in zip(texts, members, strict=True) if member)
        shown = [max(seen[term], key=lambda form: (_occurrences(form, written), seen[term][form])) for term in best]
        topics.append(Topic(t, ", ".join(shown[:3]) or f"topic {t + 1}", shown))
    return topics


def _occurrences(phrase: str, text: str) -> int:
    """How often `phrase` stands whole in `text` (not 'modal' in 'modality')."""
    return len(re.findall(rf"(?<![\w-]){re.escape(phrase)}(?![\w-])", text))


def _merge(best: list[str], term: str, replaces: bool) -> None:
    """Add `term` to the chosen terms `best` unless it shares a word with one of them; a phrase
    that `replaces` takes the place of the terms it holds whole ('attacks' -> 'adversarial attacks')."""
    overlapping = [other for other in best if set(other.split()) & set(term.split())]
    if overlapping and not replaces or any(f" {other} " not in f" {term} " for other in overlapping):
        return
    at = best.index(overlapping[0]) if overlapping else len(best)
    best[:] = [other for other in best if other not in overlapping]
    best.insert(at, term)


def place(neighbours: Iterable[tuple[str, float]], known: Mapping[str, Place]) -> Place:
    """A new paper's place among its nearest papers (id, similarity) that have one: their mean
    position weighted by similarity, and the topic that gathers most of it. Hand-written: UMAP's own `transform`
    would need the fitted model kept with every build."""
    near = [(max(score, 1e-6), known[pid]) for pid, score in neighbours if pid in known]
    if not near:
        return Place(0.5, 0.5, 0)
    total = sum(w for w, _ in near)
    votes: dict[int, float] = {}
    for weight, spot in near:
        votes[spot.topic] = votes.get(spot.topic, 0.0) + weight
    return Place(
        round(sum(w * p.x for w, p in near) / total, 5),
        round(sum(w * p.y for w, p in near) / total, 5),
        max(votes, key=lambda topic: votes[topic]),
    )
