"""Offline evaluation: gold question splits -> every question through the assistant, once per
system (BM25 only, dense only, the full hybrid pipeline) -> records and figures (the report:
rag/evaluation/report.py).

`dev` is the split to tune on; `test`, written before the code it measures but since used to
choose, is a second dev. The held-out splits (`HELD_OUT`) are only reported, and gated in CI by
the floors of eval/thresholds.toml. `leave_one_out` turns answerable dev questions into realistic
off-corpus ones: each is asked with its paper hidden, so the right answer becomes an abstention.
"""

from __future__ import annotations

import json
import os
import platform
import re
import time
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rag.common.errors import RagError
from rag.common.settings import PROJECT_ROOT, Settings
from rag.evaluation.metrics import aggregate, answer_sentences, citation_metrics, keywords_present, ranking_metrics
from rag.index.corpus import Corpus
from rag.query.analysis import INTENTS

QUESTION_TYPES = (
    "name",
    "paraphrase",
    "fact",
    "multipart",
    "multi",
    "unanswerable",
    "chinese",
    "followup",
    "standalone",
)
SYSTEMS = ("bm25", "dense", "hybrid")
EVAL_DATA = PROJECT_ROOT / "eval" / "data"  # every question split, one .jsonl file each
# The splits `rag eval` runs: dev to tune on, test (since used to choose: a second dev) and the
# held-out ones, never read for tuning, each floored on the README's figures in eval/thresholds.toml.
HELD_OUT = (
    "test2",
    "test3",
    "test3_contrast",
    "test4",
    "test5",
    "test6",
    "test7",
    "test8",
    "test9",
    "test10",
    "test11",
    "test12",
    "test13",
    "test14",
    "test15",
)
SPLITS = {name: EVAL_DATA / f"{name}.jsonl" for name in ("dev", "test", *HELD_OUT)}
# Every split file by name, those above and the dev-side ones only the eval scripts read
# (dev_contrast, dev_overview, dev_paraphrases, dev_summaries).
DATA_FILES = {path.stem: path for path in sorted(EVAL_DATA.glob("*.jsonl"))}
LOO_SPLIT = "dev-loo"
DEFAULT_THRESHOLDS = PROJECT_ROOT / "eval" / "thresholds.toml"
DEFAULT_REPORTS = PROJECT_ROOT / "eval" / "reports"
# Figures shown in tables and plots, in order, with their labels.
HEADLINE = {
    "hit_at_1": "hit@1",
    "hit_at_5": "hit@5",
    "mrr": "MRR",
    "ndcg_at_10": "nDCG@10",
    "multi_recall_at_10": "multi recall@10",
    "citation_precision": "citation precision",
    "citation_support": "citation support",
    "citation_recall": "citation recall",
    "sentence_citation_rate": "cited sentences",
    "multi_citation_recall": "multi citation recall",
    "keyword_accuracy": "keyword accuracy",
    "fact_keyword_accuracy": "keyword acc. fact/name/follow-up",
    "fact_lead_accuracy": "fact keyword in 1st sentence",
    "abstention_precision": "abstention precision",
    "abstention_recall": "abstention recall",
    "false_abstention": "false abstention",
    "dangling_markers": "dangling markers",
    "multi_fact_keyword_accuracy": "keyword acc. 2+ facts",
    "intent_accuracy": "intent as labelled",
    "named_cited": "named papers all cited",
    "shape_ok": "answer of the asked shape",
    "off_corpus_high": "off-corpus: high",
    "off_corpus_low": "off-corpus: low",
    "answerable_high_gold": "answerable: high, gold cited",
    "answerable_low": "answerable: low",
    "high_precision": "precision of high",
    "llm_own_share": "LLM's own answers (no fallback)",
}
COUNTS = {"dangling_markers"}  # a count, not a share: in the tables, not on the plot


def load_questions(path: Path, corpus: Corpus) -> list[dict]:
    """Read and check a gold file: ids unique, types known, gold papers exist, every keyword
    verbatim in a gold abstract. Errors name the line."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise RagError(f"{path}: cannot read the questions ({exc})") from exc
    questions, seen, problems = [], set(), []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{path}:{number}"
        try:
            q = json.loads(line)
            q.setdefault("history", [])
            q.setdefault("answer_keywords", [])
            missing = {"id", "type", "question", "gold"} - set(q)
            if missing:
                raise ValueError(f"missing {sorted(missing)}")
        except (ValueError, AttributeError) as exc:
            problems.append(f"{where}: not a question object ({exc})")
            continue
        if q["id"] in seen:
            problems.append(f"{where}: duplicate id {q['id']!r}")
        seen.add(q["id"])
        if q["type"] not in QUESTION_TYPES:
            problems.append(f"{where}: type {q['type']!r} is not one of {', '.join(QUESTION_TYPES)}")
        if "intent" in q and q["intent"] not in INTENTS:
            problems.append(f"{where}: intent {q['intent']!r} is not one of {', '.join(INTENTS)}")
        for pid in q["gold"]:
            if corpus.get(pid) is None:
                problems.append(f"{where}: gold paper {pid!r} is not in the corpus")
        texts = [paper.text for pid in q["gold"] if (paper := corpus.get(pid))]
        for keyword in q["answer_keywords"]:
            if not any(keyword in text for text in texts):
                problems.append(f"{where}: keyword {keyword!r} is in no gold abstract")
        if q["type"] == "unanswerable" and (q["gold"] or q["answer_keywords"]):
            problems.append(f"{where}: an unanswerable question has no gold papers or keywords")
        if q["type"] == "followup" and not q["history"]:
            problems.append(f"{where}: a follow-up needs a history")
        questions.append(q)
    if problems:
        raise RagError("invalid questions file:\n  " + "\n  ".join(problems[:20]))
    if not questions:
        raise RagError(f"{path}: no questions")
    return questions


def leave_one_out(questions: list[dict]) -> list[dict]:
    """Answerable one-paper questions asked with their paper hidden: off-corpus questions on a
    topic right next to the corpus, for calibrating abstention without touching test."""
    return [
        {
            **q,
            "id": f"{q['id']}-loo",
            "type": "unanswerable",
            "gold": [],
            "answer_keywords": [],
            "exclude": list(q["gold"]),
        }
        for q in questions
        if len(q["gold"]) == 1 and q["type"] not in ("multi", "unanswerable")
    ]


def evaluate_question(assistant, q: dict) -> dict:
    """One question's record. Citations and keywords are judged on the answer's body: a low
    answer's note quotes the question, which neither cites nor answers."""
    answer = assistant.ask(q["question"], q["history"])
    ask = answer.ask.to_dict() if answer.ask else None
    ranking = [h.paper.paper_id for h in assistant.retriever.search(answer.query, 10).hits]
    citations = [c.to_dict() for c in answer.citations]
    body = answer.body
    return {
        "id": q["id"],
        "type": q["type"],
        "intent": q.get("intent") or (ask["intent"] if ask else "other"),  # as labelled, else as analysed
        "ask": ask,
        "question": q["question"],
        "gold": q["gold"],
        "keywords": q["answer_keywords"],
        "ranking": ranking,
        "retrieval": ranking_metrics(ranking, q["gold"]),
        "answer": answer.text,
        "cited": [c["paper_id"] for c in citations],
        "citations": citation_metrics(body, citations, q["gold"], assistant.settings.answering.support_threshold),
        "keywords_ok": keywords_present(body, q["answer_keywords"]),
        "lead_keywords_ok": keywords_present((answer_sentences(body) or [""])[0], q["answer_keywords"]),
        "abstained": answer.abstained,
        "confidence": answer.confidence,
        "held": answer.held,
        "missing": answer.missing,
        "generator": answer.generator,
        "fallback": answer.fallback,
        "timings": answer.timings,
        "shape_ok": shape_ok(q, answer, citations),
    }


def shape_ok(q: dict, answer, citations: list[dict]) -> bool | None:
    """Is the answer of the shape its intent asks for? A result answer holds a figure of a cited
    abstract; a comparison cites every paper it names; a list or a summary cites every gold paper.
    None for an intent with no shape to check, or a question with no answer to give."""
    intent = q.get("intent") or (answer.ask.intent if answer.ask else "other")
    cited = {c["paper_id"] for c in citations}
    if not q["gold"]:
        return None
    if intent == "result":
        numbers = {n for c in citations for n in re.findall(r"\d+(?:[.,]\d+)?", c["text"])}
        return any(n in numbers for n in re.findall(r"\d+(?:[.,]\d+)?", answer.body))
    if intent == "comparison":
        named = {p.paper_id for p in answer.ask.named} if answer.ask else set()
        return bool(named or q["gold"]) and (named or set(q["gold"])) <= cited
    if intent in ("list", "summary"):
        return set(q["gold"]) <= cited
    return None


def summarise(records: list[dict]) -> dict:
    by_type = {
        t: aggregate([r for r in records if r["type"] == t])
        for t in QUESTION_TYPES
        if any(r["type"] == t for r in records)
    }
    by_intent = {
        i: aggregate([r for r in records if r.get("intent") == i])
        for i in INTENTS
        if any(r.get("intent") == i for r in records)
    }
    return {"overall": aggregate(records), "by_type": by_type, "by_intent": by_intent}


def evaluate(
    settings: Settings,
    splits: dict[str, list[dict]],
    systems: Sequence[str] | Mapping[str, Sequence[str]] = SYSTEMS,
    progress: bool = False,
) -> dict:
    """Run every question of every split through each system (`systems`, or per split name); the
    index is loaded once and shared. A question with an `exclude` list is asked of an assistant
    that cannot see those papers."""
    from tqdm import tqdm

    from rag.answer.generator import make_generator
    from rag.assistant import Assistant
    from rag.index.stores import load_index

    index = load_index(settings)
    generator = make_generator(settings, index.lexicon)
    report: dict[str, Any] = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "index": {
            k: index.manifest[k]
            for k in ("embedding_model", "multilingual_model", "chunk_size", "chunk_overlap", "papers", "chunks")
        },
        "generator": generator.name,
        "splits": {},
    }
    per_split = {name: systems.get(name, ()) if isinstance(systems, Mapping) else systems for name in splits}
    total = sum(len(questions) * len(per_split[name]) for name, questions in splits.items())
    bar = tqdm(total=total, desc="eval", disable=not progress, unit="q")
    started = time.perf_counter()
    for name, questions in splits.items():
        split: dict[str, Any] = {"questions": len(questions), "systems": {}, "records": {}}
        for system in per_split[name]:
            system_settings = settings.model_copy(update={"retrieval_mode": system})
            assistant = Assistant(index, system_settings, generator)
            records = []
            for q in questions:
                asked = (
                    Assistant(index, system_settings, generator, exclude=q["exclude"])
                    if q.get("exclude")
                    else assistant
                )
                records.append(evaluate_question(asked, q))
                bar.update()
            split["systems"][system] = summarise(records)
            split["records"][system] = records
        report["splits"][name] = split
    bar.close()
    report["seconds"] = round(time.perf_counter() - started, 1)
    return report
