"""Offline evaluation: gold question splits -> every question through the assistant, once per
system (BM25 only, dense only, the full hybrid pipeline) -> report.json, report.md, a plot.

`dev` is the split to tune on; `test` was written before the code it measures and is only
reported (and gated in CI). `leave_one_out` turns answerable dev questions into realistic
off-corpus ones: each is asked with its paper hidden, so the right answer becomes an abstention.
"""

from __future__ import annotations

import json
import os
import platform
import time
import tomllib
from datetime import UTC, datetime
from pathlib import Path

from .config import PROJECT_ROOT, Settings
from .corpus import Corpus
from .errors import RagError
from .metrics import aggregate, answer_sentences, citation_metrics, keywords_present, ranking_metrics

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
SPLITS = {name: PROJECT_ROOT / "eval" / f"{name}.jsonl" for name in ("dev", "test", "test2")}
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
    "off_corpus_high": "off-corpus: high",
    "off_corpus_low": "off-corpus: low",
    "answerable_high_gold": "answerable: high, gold cited",
    "answerable_low": "answerable: low",
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
        for pid in q["gold"]:
            if corpus.get(pid) is None:
                problems.append(f"{where}: gold paper {pid!r} is not in the corpus")
        texts = [corpus.get(pid).text for pid in q["gold"] if corpus.get(pid)]
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
    ranking = [h.paper.paper_id for h in assistant.retriever.search(answer.query, 10).hits]
    citations = [c.to_dict() for c in answer.citations]
    body = answer.body
    return {
        "id": q["id"],
        "type": q["type"],
        "question": q["question"],
        "gold": q["gold"],
        "keywords": q["answer_keywords"],
        "ranking": ranking,
        "retrieval": ranking_metrics(ranking, q["gold"]),
        "answer": answer.text,
        "cited": [c["paper_id"] for c in citations],
        "citations": citation_metrics(body, citations, q["gold"], assistant.settings.support_threshold),
        "keywords_ok": keywords_present(body, q["answer_keywords"]),
        "lead_keywords_ok": keywords_present((answer_sentences(body) or [""])[0], q["answer_keywords"]),
        "abstained": answer.abstained,
        "confidence": answer.confidence,
        "missing": answer.missing,
        "generator": answer.generator,
        "fallback": answer.fallback,
        "timings": answer.timings,
    }


def summarise(records: list[dict]) -> dict:
    by_type = {
        t: aggregate([r for r in records if r["type"] == t])
        for t in QUESTION_TYPES
        if any(r["type"] == t for r in records)
    }
    return {"overall": aggregate(records), "by_type": by_type}


def evaluate(settings: Settings, splits: dict[str, list[dict]], systems=SYSTEMS, progress: bool = False) -> dict:
    """Run every question of every split through each system; the index is loaded once and shared.
    A question with an `exclude` list is asked of an assistant that cannot see those papers."""
    from tqdm import tqdm

    from .assistant import Assistant
    from .generation import make_generator
    from .store import load_index

    index = load_index(settings)
    generator = make_generator(settings, index.sentence_texts())
    report = {
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "index": {
            k: index.manifest[k]
            for k in ("embedding_model", "multilingual_model", "chunk_size", "chunk_overlap", "papers", "chunks")
        },
        "generator": generator.name,
        "splits": {},
    }
    bar = tqdm(total=sum(map(len, splits.values())) * len(systems), desc="eval", disable=not progress, unit="q")
    started = time.perf_counter()
    for name, questions in splits.items():
        split = {"questions": len(questions), "systems": {}, "records": {}}
        for system in systems:
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


def failures(records: list[dict]) -> list[dict]:
    """Questions to read: gold missed in the top 5, keywords missing, or a wrong abstention."""
    out = []
    for r in records:
        reasons = []
        if r["gold"] and not r["retrieval"]["hit_at_5"]:
            reasons.append("gold not in top 5")
        if r["gold"] and r["abstained"]:
            reasons.append("abstained on an answerable question")
        if not r["gold"] and not r["abstained"]:
            reasons.append("answered an unanswerable question")
        if r["gold"] and not r["abstained"] and r["keywords"] and not r["keywords_ok"]:
            reasons.append("keywords missing")
        if r["gold"] and not r["abstained"] and set(r["cited"]) - set(r["gold"]):
            reasons.append("cited a paper that is not gold")
        if r["type"] == "multi" and not r["abstained"] and set(r["gold"]) - set(r["cited"]):
            reasons.append(f"cited {len(set(r['gold']) & set(r['cited']))} of {len(r['gold'])} gold papers")
        if r["citations"].get("dangling"):
            reasons.append("dangling marker")
        if not r["gold"] and r.get("confidence") == "high":
            reasons.append("off-corpus answered with high confidence")
        if r["gold"] and r.get("confidence") == "low":
            reasons.append(f"answered low (missing: {r['missing']})")
        if reasons:
            out.append(
                {
                    "id": r["id"],
                    "type": r["type"],
                    "question": r["question"],
                    "why": "; ".join(reasons),
                    "answer": r["answer"],
                }
            )
    return out


def _cell(value) -> str:
    return "–" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def columns(report: dict) -> list[tuple[str, str]]:
    """(split, system) pairs in report order: the columns of every table and the bars of the plot."""
    return [(split, system) for split, data in report["splits"].items() for system in data["systems"]]


def markdown(report: dict) -> str:
    cols = columns(report)
    overall = lambda split, system: report["splits"][split]["systems"][system]["overall"]  # noqa: E731
    sizes = ", ".join(f"{name} {data['questions']}" for name, data in report["splits"].items())
    lines = [
        f"# Evaluation {report['created']}",
        "",
        f"Questions: {sizes}; generator `{report['generator']}`, index {report['index']}, "
        f"{report['machine']}, {report['seconds']} s. Tune on dev; test is only reported.",
        "",
        "## Systems",
        "",
        "| metric | " + " | ".join(f"{split} {system}" for split, system in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for key, label in HEADLINE.items():
        lines.append(f"| {label} | " + " | ".join(_cell(overall(*c)[key]) for c in cols) + " |")
    for stage in ("retrieve", "first_piece", "generate", "total"):
        lines.append(
            f"| {stage} ms p50 / p95 | "
            + " | ".join(f"{overall(*c)[f'{stage}_ms_p50']:.1f} / {overall(*c)[f'{stage}_ms_p95']:.1f}" for c in cols)
            + " |"
        )
    keys = [
        "questions",
        "hit_at_1",
        "hit_at_5",
        "mrr",
        "multi_recall_at_10",
        "citation_precision",
        "citation_recall",
        "keyword_accuracy",
        "abstention_recall",
        "false_abstention",
    ]
    for split, system in cols:
        by_type = report["splits"][split]["systems"][system]["by_type"]
        lines += [
            "",
            f"## By question type: {split} {system}",
            "",
            "| type | " + " | ".join(HEADLINE.get(k, k) for k in keys) + " |",
            "|---|" + "---|" * len(keys),
        ]
        for qtype, figures in by_type.items():
            lines.append(f"| {qtype} | " + " | ".join(_cell(figures[k]) for k in keys) + " |")
    for split, system in cols:
        failed = failures(report["splits"][split]["records"][system])
        lines += ["", f"## Failures: {split} {system} ({len(failed)})", ""]
        if failed:
            lines += ["| id | type | why | question | answer |", "|---|---|---|---|---|"]
            for f in failed:
                answer = f["answer"].replace("|", "\\|").replace("\n", " ")[:200]
                lines.append(f"| {f['id']} | {f['type']} | {f['why']} | {f['question'].replace('|', '/')} | {answer} |")
    return "\n".join(lines) + "\n"


def plot(report: dict, path: Path) -> None:
    """One panel per split, the systems side by side in each."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    splits = list(report["splits"])
    fig, axes = plt.subplots(len(splits) + 1, 1, figsize=(12, 3.8 * (len(splits) + 1)), squeeze=False)
    outcomes(report, axes[-1, 0])
    for ax, split in zip(axes[:-1, 0], splits, strict=False):
        systems = report["splits"][split]["systems"]
        keys = [k for k in HEADLINE if k not in COUNTS and any(systems[s]["overall"][k] is not None for s in systems)]
        width = 0.8 / len(systems)
        for i, system in enumerate(systems):
            values = [systems[system]["overall"][k] or 0.0 for k in keys]
            ax.bar([x + i * width for x in range(len(keys))], values, width, label=system)
        ax.set_xticks([x + width * (len(systems) - 1) / 2 for x in range(len(keys))])
        ax.set_xticklabels([HEADLINE[k] for k in keys], rotation=35, ha="right")
        ax.set_ylim(0, 1.05)
        ax.set_title(f"{split}: {report['splits'][split]['questions']} questions, generator {report['generator']}")
        ax.legend(loc="lower left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def outcomes(report: dict, ax) -> None:
    """Stacked bars: how the off-corpus and the answerable questions of each split ended, for the
    served system (hybrid) when it was evaluated, else the last one."""
    labels, rows = [], []
    for split, systems in report["splits"].items():
        system = "hybrid" if "hybrid" in systems["systems"] else list(systems["systems"])[-1]
        f = systems["systems"][system]["overall"]
        if f["abstention_recall"] is not None:
            labels.append(f"{split} {system}: off-corpus")
            rows.append([f["off_corpus_high"], f["off_corpus_low"], f["abstention_recall"], 0.0])
        if f["false_abstention"] is not None:
            labels.append(f"{split} {system}: answerable")
            high_gold = f["answerable_high_gold"]
            rows.append(
                [
                    high_gold,
                    f["answerable_low"],
                    f["false_abstention"],
                    max(0.0, 1 - high_gold - f["answerable_low"] - f["false_abstention"]),
                ]
            )
    left = [0.0] * len(rows)
    for i, (name, colour) in enumerate(
        [
            ("high", "tab:green"),
            ("low", "tab:orange"),
            ("none (abstained)", "tab:grey"),
            ("high, no gold cited", "tab:red"),
        ]
    ):
        widths = [row[i] or 0.0 for row in rows]
        ax.barh(range(len(rows)), widths, left=left, color=colour, label=name)
        left = [a + b for a, b in zip(left, widths, strict=False)]
    ax.set_yticks(range(len(rows)))
    ax.set_yticklabels(labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_title("Outcomes: confidence of the answers to off-corpus and to answerable questions")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4, fontsize=8)


def write_report(report: dict, reports_dir: Path) -> Path:
    out = Path(reports_dir) / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out / "report.md").write_text(markdown(report))
    plot(report, out / "metrics.png")
    return out


def below_floors(report: dict, thresholds_path: Path = DEFAULT_THRESHOLDS) -> list[str]:
    """Each figure under its floor in thresholds.toml ([split.system] metric = floor; names
    starting with "max_" are ceilings on the metric named after the prefix)."""
    floors = tomllib.loads(Path(thresholds_path).read_text())
    problems = []
    for split, systems in floors.items():
        for system, limits in systems.items():
            if split not in report["splits"] or system not in report["splits"][split]["systems"]:
                problems.append(f"{split} {system} was not evaluated")
                continue
            figures = report["splits"][split]["systems"][system]["overall"]
            for key, limit in limits.items():
                if key.startswith("max_"):
                    value = figures[key[4:]]
                    if value is None or value > limit:
                        problems.append(f"{split} {system} {key[4:]} = {value} is above its ceiling {limit}")
                elif figures[key] is None or figures[key] < limit:
                    problems.append(f"{split} {system} {key} = {figures[key]} is below its floor {limit}")
    return problems
