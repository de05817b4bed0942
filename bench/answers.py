"""Every answer to every eval question, written to one JSON Lines file: run it before and after a
change that must leave answers as they are, then `cmp` the two files (or `--diff` them).

    python -m bench.answers --out before.jsonl
    python -m bench.answers --out after.jsonl --diff before.jsonl

Each line: split, system, question id, then the answer's text, cited papers, confidence,
missing phrase, the share of the question held and the analysed intent. Every split under eval/ is asked (dev's
leave-one-out variants too) with each retrieval system, on the embedded defaults.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rag.answer.generator import make_generator
from rag.assistant import Assistant
from rag.common.settings import PROJECT_ROOT, load_settings
from rag.evaluation.runs import leave_one_out
from rag.index.stores import load_index

SYSTEMS = ("hybrid", "bm25", "dense")


def questions() -> dict[str, list[dict]]:
    splits = {}
    for path in sorted((PROJECT_ROOT / "eval").rglob("*.jsonl")):
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
        splits[path.stem] = rows
        if path.stem == "dev":
            splits["dev-loo"] = leave_one_out([{**q, "history": q.get("history", [])} for q in rows])
    return splits


def dump(out: Path, systems: tuple[str, ...] = SYSTEMS) -> int:
    settings = load_settings()
    index = load_index(settings)
    generator = make_generator(settings, index.lexicon)
    count = 0
    with out.open("w", encoding="utf-8") as f:
        for system in systems:
            system_settings = settings.model_copy(update={"retrieval_mode": system})
            assistant = Assistant(index, system_settings, generator)
            for split, rows in questions().items():
                for q in rows:
                    asked = (
                        Assistant(index, system_settings, generator, exclude=q["exclude"])
                        if q.get("exclude")
                        else assistant
                    )
                    answer = asked.ask(q["question"], q.get("history") or [])
                    record = {
                        "split": split,
                        "system": system,
                        "id": q["id"],
                        "answer": answer.text,
                        "citations": [c.paper_id for c in answer.citations],
                        "confidence": answer.confidence,
                        "missing": answer.missing,
                        "held": round(answer.held, 6),
                        "intent": answer.ask.intent if answer.ask else None,
                    }
                    f.write(json.dumps(record, ensure_ascii=False) + "\n")
                    count += 1
    return count


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="where the answers are written")
    parser.add_argument("--diff", type=Path, help="an earlier dump: print every answer that differs")
    parser.add_argument("--systems", default=",".join(SYSTEMS), help="retrieval systems, comma-separated")
    args = parser.parse_args()
    count = dump(args.out, tuple(args.systems.split(",")))
    print(f"{count} answers -> {args.out}")
    if args.diff is None:
        return 0

    def keyed(path: Path) -> dict[tuple, str]:
        rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        return {(r["split"], r["system"], r["id"]): json.dumps(r, ensure_ascii=False) for r in rows}

    before, after = keyed(args.diff), keyed(args.out)
    common = [key for key in after if key in before]
    changed = [key for key in common if before[key] != after[key]]
    for key in changed:
        print(f"- {before[key]}\n+ {after[key]}")
    new, gone = len(after) - len(common), len(before) - len(common)
    print(f"{len(changed)} of {len(common)} answers differ" + (f"; {new} new, {gone} gone" if new or gone else ""))
    return 1 if changed or gone else 0


if __name__ == "__main__":
    sys.exit(main())
