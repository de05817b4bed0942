"""An evaluation's report: the failures to read, markdown tables, the plot, the report folder
and the CI gate (floors per split and system in eval/thresholds.toml, which only rise)."""

from __future__ import annotations

import json
import subprocess
import tomllib
import warnings
from datetime import UTC, datetime
from pathlib import Path

from rag.evaluation.metrics import CURVE_AT
from rag.evaluation.runs import COUNTS, DEFAULT_THRESHOLDS, HEADLINE


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


def _table(column: str, rows: dict[str, dict], keys: list[str]) -> list[str]:
    """A Markdown table: one row per group of questions, one column per figure."""
    return [
        f"| {column} | " + " | ".join(HEADLINE.get(k, k) for k in keys) + " |",
        "|---|" + "---|" * len(keys),
        *(f"| {name} | " + " | ".join(_cell(figures[k]) for k in keys) + " |" for name, figures in rows.items()),
    ]


def markdown(report: dict) -> str:
    cols = columns(report)
    overall = lambda split, system: report["splits"][split]["systems"][system]["overall"]  # noqa: E731
    sizes = ", ".join(f"{name} {data['questions']}" for name, data in report["splits"].items())
    lines = [
        f"# Evaluation {report['created']}",
        "",
        f"Questions: {sizes}; generator `{report['generator']}`, index {report['index']}, "
        f"{report['machine']}, {report['seconds']} s. Tune on dev (test, used to choose, is a second dev); "
        "test2 on are held out, only reported.",
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
    lines += [
        "",
        "## Selective answers: precision of high / its coverage, by `missing_below`",
        "",
        "| missing_below | " + " | ".join(f"{split} {system}" for split, system in cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    for i, at in enumerate(CURVE_AT):
        points = [overall(*c)["high_curve"][i] for c in cols]
        cells = (f"{_cell(p['precision'])} / {_cell(p['coverage'])}" for p in points)
        lines.append(f"| {at} | " + " | ".join(cells) + " |")
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
    intent_keys = [
        "questions",
        "intent_accuracy",
        "keyword_accuracy",
        "named_cited",
        "shape_ok",
        "multi_citation_recall",
    ]
    for group, title, column, shown in (
        ("by_type", "question type", "type", keys),
        ("by_intent", "intent", "intent", intent_keys),
    ):
        for split, system in cols:
            lines += ["", f"## By {title}: {split} {system}", ""]
            lines += _table(column, report["splits"][split]["systems"][system].get(group, {}), shown)
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
    fig, axes = plt.subplots(len(splits) + 2, 1, figsize=(12, 3.8 * (len(splits) + 2)), squeeze=False)
    outcomes(report, axes[-2, 0])
    selective(report, axes[-1, 0])
    for ax, split in zip(axes[:-2, 0], splits, strict=False):
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


def selective(report: dict, ax) -> None:
    """Precision of high against its coverage as `missing_below` varies, one line per split
    (the served system, hybrid, when it was evaluated)."""
    for split, systems in report["splits"].items():
        system = "hybrid" if "hybrid" in systems["systems"] else list(systems["systems"])[-1]
        points = [p for p in systems["systems"][system]["overall"]["high_curve"] if p["precision"] is not None]
        if any(p["coverage"] is not None for p in points):
            ax.plot([p["coverage"] or 0.0 for p in points], [p["precision"] for p in points], marker="o", label=split)
    ax.set_xlabel("coverage: answerable questions answered high, a gold paper cited")
    ax.set_ylabel("precision of high")
    ax.set_xlim(0, 1)
    ax.set_title("Selective answers: each point a value of missing_below (0 to 1)")
    ax.legend(loc="lower left", fontsize=8)


def write_report(report: dict, reports_dir: Path) -> Path:
    out = Path(reports_dir) / datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, ensure_ascii=False))
    (out / "report.md").write_text(markdown(report))
    plot(report, out / "metrics.png")
    return out


def below_floors(report: dict, thresholds_path: Path = DEFAULT_THRESHOLDS) -> list[str]:
    """The gate: each figure under its floor in thresholds.toml ([split.system] metric = floor;
    names starting with "max_" are ceilings on the metric named after the prefix), and each floor
    lowered since git HEAD with no other floor of its split raised (`lowered_floors`; skipped,
    with a warning, where git HEAD holds no such file)."""
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
    before, why = floors_at_head(thresholds_path)
    if before is None:
        warnings.warn(f"floors not compared with git HEAD's: {why}", stacklevel=2)
    else:
        problems += lowered_floors(before, floors)
    return problems


def lowered_floors(before: dict, after: dict) -> list[str]:
    """Floors that only rise: per split, the floors of `after` lower than in `before` (a ceiling
    "max_" higher, a floor removed), unless the same change raises another floor of that split
    (the metric it was traded for; a floor new to the split counts). Both are parsed thresholds."""
    problems = []
    for split, systems in before.items():
        lowered, raised = [], False
        for system, limits in systems.items():
            new = after.get(split, {}).get(system, {})
            for key, old in limits.items():
                if key not in new:
                    lowered.append(f"{system} {key} {old} removed")
                elif _looser(key, new[key], old):
                    lowered.append(f"{system} {key} {old} -> {new[key]}")
                elif _looser(key, old, new[key]):
                    raised = True
            raised = raised or any(key not in limits for key in new)
        for system in after.get(split, {}).keys() - systems.keys():
            raised = raised or bool(after[split][system])
        if lowered and not raised:
            problems.append(
                f"{split}: {', '.join(lowered)} since git HEAD, and no other floor of {split} raised: "
                "raise the floor of the metric it was traded for in the same change"
            )
    return problems


def _looser(key: str, limit: float, than: float) -> bool:
    """Whether `limit` lets more through than `than`: lower for a floor, higher for a ceiling ("max_")."""
    return limit > than if key.startswith("max_") else limit < than


def floors_at_head(thresholds_path: Path) -> tuple[dict | None, str]:
    """The thresholds file as git HEAD holds it, parsed; or None and why not (no git, not in a
    checkout, not committed)."""
    path = Path(thresholds_path).resolve()
    git = lambda *args: subprocess.run(  # noqa: E731
        ["git", "-C", str(path.parent), *args], capture_output=True, text=True, timeout=30
    )
    try:
        top = git("rev-parse", "--show-toplevel")
        if top.returncode != 0:
            return None, f"{path.parent} is not in a git checkout ({top.stderr.strip()})"
        relative = path.relative_to(Path(top.stdout.strip()).resolve()).as_posix()
        shown = git("show", f"HEAD:{relative}")
    except (OSError, subprocess.TimeoutExpired) as err:
        return None, f"git did not run ({err})"
    if shown.returncode != 0:
        return None, f"git HEAD holds no {relative} ({shown.stderr.strip()})"
    return tomllib.loads(shown.stdout), ""
