"""Answer-quality metrics, all computable offline without an LLM.

Per question: retrieval ranks against the gold papers, citations against the gold papers and
against the cited text (ALCE-style), keywords, abstention. `aggregate` turns a list of
per-question records into the figures of a report.
"""

from __future__ import annotations

import math
import re
from statistics import median

from rag.answer.citations import MARKER, lexical_support

_SENTENCE = re.compile(
    r"(?<=[.!?])\s+(?=[A-Z0-9\[\"'(])|(?<=[。！？])|\n+"
)  # a line (list item, table row) ends one too


def ranking_metrics(ranking: list[str], gold: list[str]) -> dict:
    """hit@1, hit@5, reciprocal rank, nDCG@10 (binary relevance) and recall@10."""
    gold_set = set(gold)
    ranks = [i for i, pid in enumerate(ranking[:10], start=1) if pid in gold_set]
    dcg = sum(1 / math.log2(r + 1) for r in ranks)
    ideal = sum(1 / math.log2(r + 1) for r in range(1, min(len(gold_set), 10) + 1))
    return {
        "hit_at_1": float(bool(ranks) and ranks[0] == 1),
        "hit_at_5": float(bool(ranks) and ranks[0] <= 5),
        "rr": 1 / ranks[0] if ranks else 0.0,
        "ndcg_at_10": dcg / ideal if ideal else 0.0,
        "recall_at_10": len(ranks) / len(gold_set) if gold_set else 0.0,
    }


def answer_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE.split(text) if s.strip()]


def citation_metrics(text: str, citations: list[dict], gold: list[str], support_threshold: float) -> dict:
    """Cited papers that are gold, cited sentences their paper supports (lexical overlap), gold
    papers cited, answer sentences that carry a citation, and markers that point to no citation."""
    by_n = {c["n"]: c for c in citations}
    cited = [c["paper_id"] for c in citations]
    pairs = supported = 0
    sentences = answer_sentences(text)
    with_marker = dangling = 0
    for sentence in sentences:
        numbers = {int(n) for body in MARKER.findall(sentence) for n in re.findall(r"\d+", body)}
        with_marker += bool(numbers)
        dangling += len(numbers - set(by_n))
        for n in numbers:
            if n in by_n:
                pairs += 1
                supported += lexical_support(sentence, by_n[n]["text"]) >= support_threshold
    gold_set = set(gold)
    return {
        "cited": len(cited),
        "cited_gold": sum(pid in gold_set for pid in cited),
        "pairs": pairs,
        "pairs_supported": supported,
        "gold_cited": len(gold_set & set(cited)),
        "sentences": len(sentences),
        "sentences_cited": with_marker,
        "dangling": dangling,
    }


def keywords_present(text: str, keywords: list[str]) -> bool:
    lowered = text.lower()
    return all(k.lower() in lowered for k in keywords)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(q * len(ordered)) - 1))]


def _mean(values) -> float | None:
    values = list(values)
    return sum(values) / len(values) if values else None


def _ratio(numerator: int, denominator: int) -> float | None:
    return numerator / denominator if denominator else None


# The questions that ask for something specific an answer must state.
KEYWORD_TYPES = ("fact", "name", "followup")


def _confidence(record: dict) -> str:
    """A record's outcome; records of reports written before graded answers count as 'high'."""
    return record.get("confidence", "none" if record["abstained"] else "high")


# The `missing_below` values the selective-answering curve is drawn at (0: only answers whose
# every constraint is found are high; 1: every answer is).
CURVE_AT = (0.0, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5, 1.0)


def high_curve(records: list[dict]) -> list[dict]:
    """Precision of `high` against its coverage had `missing_below` been each value of `CURVE_AT`:
    an answer is high when the share of the question its papers hold (`Answer.held`) exceeds 1 - missing_below."""
    answerable = [r for r in records if r["gold"]]
    out = []
    for at in CURVE_AT:
        high = [r for r in records if not r["abstained"] and r.get("held", 1.0) > 1.0 - at - 1e-9]
        gold = [r for r in high if set(r["gold"]) & set(r["cited"])]
        out.append(
            {
                "missing_below": at,
                "precision": _ratio(len(gold), len(high)),
                "coverage": _ratio(len(gold), len(answerable)),
            }
        )
    return out


def aggregate(records: list[dict]) -> dict:
    """The figures for one system over `records` (each from `evaluation.evaluate_question`)."""
    answerable = [r for r in records if r["gold"]]
    unanswerable = [r for r in records if not r["gold"]]
    multi = [r for r in answerable if r["type"] == "multi"]
    answered = [r for r in answerable if not r["abstained"]]
    with_keywords = [r for r in answerable if r["keywords"]]
    specific = [r for r in with_keywords if r["type"] in KEYWORD_TYPES]
    abstained = [r for r in records if r["abstained"]]
    cit = lambda key: sum(r["citations"][key] for r in answered)  # noqa: E731
    figures = {
        "questions": len(records),
        "hit_at_1": _mean(r["retrieval"]["hit_at_1"] for r in answerable),
        "hit_at_5": _mean(r["retrieval"]["hit_at_5"] for r in answerable),
        "mrr": _mean(r["retrieval"]["rr"] for r in answerable),
        "ndcg_at_10": _mean(r["retrieval"]["ndcg_at_10"] for r in answerable),
        "multi_recall_at_10": _mean(r["retrieval"]["recall_at_10"] for r in multi),
        "citation_precision": _ratio(cit("cited_gold"), cit("cited")),
        "citation_support": _ratio(cit("pairs_supported"), cit("pairs")),
        "citation_recall": _mean(r["citations"]["gold_cited"] / len(r["gold"]) for r in answered),
        "sentence_citation_rate": _ratio(cit("sentences_cited"), cit("sentences")),
        "keyword_accuracy": _mean(float(r["keywords_ok"]) for r in with_keywords),
        "fact_keyword_accuracy": _mean(float(r["keywords_ok"]) for r in specific),
        "fact_lead_accuracy": _mean(float(r.get("lead_keywords_ok", False)) for r in specific),
        # Questions that ask for two or more facts: every one must be in the answer.
        "multi_fact_keyword_accuracy": _mean(float(r["keywords_ok"]) for r in with_keywords if len(r["keywords"]) >= 2),
        # The three outcomes (high, low, none) of off-corpus and of answerable questions; the
        # rest of each is abstention_recall and false_abstention.
        "off_corpus_high": _ratio(sum(_confidence(r) == "high" for r in unanswerable), len(unanswerable)),
        "off_corpus_low": _ratio(sum(_confidence(r) == "low" for r in unanswerable), len(unanswerable)),
        "answerable_high_gold": _ratio(
            sum(_confidence(r) == "high" and bool(set(r["gold"]) & set(r["cited"])) for r in answerable),
            len(answerable),
        ),
        "answerable_low": _ratio(sum(_confidence(r) == "low" for r in answerable), len(answerable)),
        # Selective answering: of the answers given as sure ('high'), the share that cite a gold
        # paper of an answerable question; its coverage is answerable_high_gold.
        "high_precision": _ratio(
            sum(bool(set(r["gold"]) & set(r["cited"])) for r in records if _confidence(r) == "high"),
            sum(_confidence(r) == "high" for r in records),
        ),
        "multi_citation_recall": _mean(
            r["citations"]["gold_cited"] / len(r["gold"]) for r in answered if r["type"] == "multi"
        ),
        "dangling_markers": sum(r["citations"].get("dangling", 0) for r in answered),
        "intent_accuracy": _mean(
            float(r["ask"]["intent"] == r["intent"]) for r in records if r.get("ask") and r.get("intent")
        ),
        # A question naming papers (a comparison above all) cites each of them.
        "named_cited": _mean(
            float({p["paper_id"] for p in r["ask"]["named"]} <= set(r["cited"]))
            for r in answered
            if r.get("ask") and r["ask"]["named"]
        ),
        "shape_ok": _mean(float(r["shape_ok"]) for r in records if r.get("shape_ok") is not None),
        "abstention_precision": _ratio(sum(not r["gold"] for r in abstained), len(abstained)),
        "abstention_recall": _ratio(sum(r["abstained"] for r in unanswerable), len(unanswerable)),
        "false_abstention": _ratio(sum(r["abstained"] for r in answerable), len(answerable)),
        # With an LLM: the answers that are its own (no fallback) and kept every marker valid.
        "llm_own_share": _ratio(
            sum(
                r.get("generator") == "llm" and not r["fallback"] and not r["citations"].get("dangling")
                for r in records
                if not r["abstained"]
            ),
            sum(not r["abstained"] for r in records),
        )
        if any(r.get("generator") == "llm" or r["fallback"] for r in records)
        else None,
    }
    figures["high_curve"] = high_curve(records)
    for stage in ("retrieve", "first_piece", "generate", "total"):
        values = [r["timings"].get(stage, 0.0) for r in records]
        figures[f"{stage}_ms_p50"] = median(values) if values else 0.0
        figures[f"{stage}_ms_p95"] = percentile(values, 0.95)
    return figures
