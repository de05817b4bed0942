"""Fit whether a question asks for every paper that qualifies (`SeveralModel`,
rag/common/several.json) on the dev side only, and say how it does; never on test.

"Which papers ...?" is caught by a rule (rag/common/text.py `asks_for_several`), a casual request
for a list is not: "protein modeling work, line 'em up", "pull the relevant ones for me", "every
paper that touches it". Read as a question about one paper, it cites one. A logistic regression
over the question's vector (the mean of its word pieces in context at the framing tagger's layer
of the English encoder: what the judge reads anyway) learns the request from how the writers
labelled it.

Examples: every English question of the splits whose writer gave its intent: 1 for a list, or a
summary of more than one paper; 0 for any other intent. dev_casual3 is left out, so that the
verdict on it (rag eval) measures the model on phrasings it did not see. Checked by 5-fold
cross-validation grouped by paper (a question and its twin in one fold). Prints, per threshold,
the lists the rule misses that it catches and the other questions it takes for lists.

    .venv/bin/python -m eval.several                     # fit and report
    .venv/bin/python -m eval.several --write   # ...and adopt it (rag/common/several.json)

`several_above` ([framing] in rag/common/fitted_weights.toml) is then chosen on the verdict (rag
eval on the dev side: lists citing every gold paper, citation precision, the twins).
"""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold, cross_val_predict

from eval.calibrate import tuning
from eval.framing import papers_of, shipped_tagger
from rag.common.framing_weights import SEVERAL_MODEL, SeveralModel, question_vector
from rag.common.settings import Settings
from rag.common.text import asks_for_several
from rag.query.analysis import read

SPLITS = ("dev", "dev_contrast", "dev_casual", "dev_casual2", "dev_casual4", "dev_overview", "dev_summaries")
THRESHOLDS = (0.3, 0.5, 0.7, 0.8, 0.9)
# 384 weights on about 1,300 questions, one in eight a list: the classes weighed alike, C chosen by
# cross-validation (0.3-10: AUC 0.963-0.986, the tagger's layer over the last layer's 0.94).
C = 3.0


def label(question: dict) -> int | None:
    """1: it asks for every paper that qualifies; 0: anything else its writer labelled; None: unlabelled."""
    intent = question.get("intent")
    if intent is None:
        return None
    return int(intent == "list" or (intent == "summary" and len(question.get("gold") or []) > 1))


def labelled(settings: Settings, splits: tuple[str, ...], english: bool = False) -> tuple[list[dict], int | None]:
    """Every question of the splits whose writer gave its intent (`english`: English ones only), none
    asked in a conversation: the question, its paper, and its vector at the framing tagger's layer of
    the English encoder (what the judge reads); and that layer."""
    tagger, index = shipped_tagger(settings)  # this reads the tagger's layer
    reader = index.embedder
    rows = []
    for split in splits:
        questions = [q for q in tuning(split, index.corpus) if label(q) is not None and not q.get("history")]
        paper = papers_of(questions)
        for q in questions:
            if english and read(q["question"]).foreign:
                continue
            vector = question_vector(reader.tokens([q["question"]], tagger.layer)[0].at(tagger.layer))
            rows.append({"q": q, "paper": paper[q["id"]], "x": vector})
    return rows, tagger.layer


def arguments(description: str, model: Path) -> tuple[Settings, tuple[str, ...], bool]:
    """The settings, the dev-side splits (--splits) and whether to write `model` (--write) of a model
    of the question fitted here; never dev_casual3, where the verdict measures it."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--splits", default=",".join(SPLITS), help="dev-side splits with writers' intents")
    parser.add_argument("--write", action="store_true", help=f"write {model.name}")
    args = parser.parse_args()
    splits = tuple(args.splits.split(","))
    if "dev_casual3" in splits:
        raise SystemExit("dev_casual3 is where the verdict measures it: leave it out")
    return Settings(generator="extractive"), splits, args.write


def main() -> None:
    settings, splits, write = arguments("Fit whether a question asks for several papers, on dev.", SEVERAL_MODEL)
    rows, layer = labelled(settings, splits)
    x = np.vstack([r["x"] for r in rows])
    y = np.array([label(r["q"]) for r in rows])
    rule = np.array([asks_for_several(r["q"]["question"]) for r in rows])
    fit = LogisticRegression(C=C, class_weight="balanced", max_iter=3000)
    predicted = cross_val_predict(
        fit, x, y, cv=GroupKFold(5), groups=[r["paper"] for r in rows], method="predict_proba"
    )[:, 1]
    fit.fit(x, y)
    auc = round(float(roc_auc_score(y, predicted)), 3)
    print(f"{len(rows)} questions of {'+'.join(splits)}: {int(y.sum())} ask for several papers")
    print(f"cross-validated AUC {auc}; the rule catches {rule[y == 1].mean():.3f}, wrongly {rule[y == 0].mean():.3f}")
    missed, others = (y == 1) & ~rule, (y == 0) & ~rule
    for above in THRESHOLDS:
        caught = predicted >= above
        print(
            f"  above {above}: of {int(missed.sum())} lists the rule misses caught {caught[missed].mean():.3f}; "
            f"others taken for lists {int((caught & others).sum())} of {int(others.sum())}"
        )
    if write:
        model = SeveralModel(
            encoder=settings.indexing.embedding_model,
            layer=layer,
            bias=round(float(fit.intercept_[0]), 5),
            vector=[round(float(v), 5) for v in fit.coef_[0]],
            fit={
                "date": datetime.date.today().isoformat(),
                "splits": list(splits),
                "questions": len(rows),
                "several": int(y.sum()),
                "C": C,
                "cross_validated_auc": auc,
            },
        )
        SEVERAL_MODEL.write_text(model.model_dump_json(indent=1) + "\n", encoding="utf-8")
        print(f"wrote {SEVERAL_MODEL}")


if __name__ == "__main__":
    main()
