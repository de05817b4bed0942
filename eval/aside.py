"""Fit which constraints are the asker's aside (`AsideWeights`, rag/query/framing.py's
`aside_measures`) on the dev side only, and say how it does; never on test.

A casual question carries the asker's situation ("pathology core lab, budget season again.",
"filling a comparison spreadsheet"): domain words the framing tagger reads as content, which no
paper holds, so the answer was `low` naming them. What tells them apart is where they sit, not
their words: a clause that speaks of the asker, a sentence other than the one asked, among words
the tagger reads as framing. A logistic regression on those measures and the tagger's reading of
the phrase itself.

Examples: every constraint the question analysis finds in a question whose writer listed its
constraints and its framing: labelled 0 (an aside) when it lies within a phrase the writer marked
as framing, 1 when it overlaps a listed constraint (the swapped term of an off-corpus twin among
them), else left out. Measured with the shipped framing tagger on a split it did not learn from
(eval/tagger.py's WORD_LABELLED), checked by 5-fold cross-validation grouped by paper (a question and
its twin in one fold). Prints, per threshold, the asides caught among those the tagger reads as
content and the constraints lost; `below` is then chosen on the verdict (rag eval on the dev
side, the twins the guard) and given with --write.

    .venv/bin/python -m eval.aside                     # fit and report
    .venv/bin/python -m eval.aside --write --below 0.1  # ...and adopt it (rag/common/fitted_weights.toml)
"""

from __future__ import annotations

import argparse

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score
from sklearn.model_selection import GroupKFold, cross_val_predict

from eval.calibrate import tuning
from eval.framing import papers_of, shipped_tagger
from eval.tagger import WORD_LABELLED
from rag.common.framing_weights import AsideWeights
from rag.common.settings import Settings
from rag.common.weights import FITTED_WEIGHTS, fit_record, write_fitted
from rag.query.analysis import analyse
from rag.query.framing import aside_measures, tagged

SPLITS = ("dev_casual4",)
FEATURES = ("personal", "apart", "clause", "inside", "clause_words")
SIGNS = (-1, -1, 1, 1, 1)  # AsideWeights' bounds
THRESHOLDS = (0.05, 0.1, 0.15, 0.2, 0.3)
TAGGER_READS_CONTENT = 0.3  # the asides that matter: those the tagger alone keeps as content


def examples(settings: Settings, splits: tuple[str, ...]) -> list[dict]:
    """Each labelled constraint of the splits' questions, with its measures and its paper."""
    if set(splits) & set(WORD_LABELLED):
        raise SystemExit(f"the framing tagger read words of {', '.join(WORD_LABELLED)}: its reading is no test there")
    model, index = shipped_tagger(settings)
    reader = index.embedder  # the English encoder the judge reads questions with
    rows = []
    for split in splits:
        questions = [q for q in tuning(split, index.corpus) if q.get("framing")]
        paper = papers_of(questions)
        for q in questions:
            text = q["question"]
            framing = [f.lower() for f in q["framing"]]
            listed = [c.lower() for c in q.get("constraints", [])]
            words = tagged(text, reader.tokens([text], model.layer)[0], model)
            for phrase, measures in aside_measures(text, analyse(text).constraints, words).items():
                lowered = phrase.lower()
                if any(lowered in f for f in framing):
                    label = 0
                elif any(lowered in c or c in lowered for c in listed):
                    label = 1
                else:
                    continue
                rows.append({"paper": paper[q["id"]], "twin": bool(q.get("contrast_of")), "y": label, "x": measures})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description="Fit which constraints are the asker's aside, on the dev side.")
    parser.add_argument(
        "--splits", default=",".join(SPLITS), help="labelled dev-side splits the tagger did not learn from"
    )
    parser.add_argument("--below", type=float, default=0.0, help="the threshold written with --write (0: off)")
    parser.add_argument("--write", action="store_true", help=f"write [framing.aside] to {FITTED_WEIGHTS.name}")
    args = parser.parse_args()
    settings = Settings(generator="extractive")
    splits = tuple(args.splits.split(","))
    rows = examples(settings, splits)
    x = np.array([[*r["x"][:4], r["x"][4] / 10] for r in rows])
    y = np.array([r["y"] for r in rows])
    groups = [r["paper"] for r in rows]
    fit = LogisticRegression(max_iter=1000)
    predicted = cross_val_predict(fit, x, y, cv=GroupKFold(5), groups=groups, method="predict_proba")[:, 1]
    fit.fit(x, y)
    weights = dict(zip(FEATURES, fit.coef_[0].round(3).tolist(), strict=True))
    wrong = [f for f, sign in zip(FEATURES, SIGNS, strict=True) if weights[f] * sign < 0]
    if wrong:
        raise SystemExit(f"fitted against their signs: {', '.join(wrong)}")
    kept = np.array([r["x"][3] >= TAGGER_READS_CONTENT for r in rows])
    twin = np.array([r["twin"] and r["y"] == 1 for r in rows])
    print(f"{len(rows)} constraints of {'+'.join(splits)}: {int((y == 0).sum())} asides, {int(y.sum())} content")
    print(f"bias {fit.intercept_[0]:.3f}, " + ", ".join(f"{f} {w}" for f, w in weights.items()))
    print(f"cross-validated AUC {roc_auc_score(y, predicted):.3f}")
    for below in THRESHOLDS:
        aside = predicted < below
        print(
            f"  below {below}: asides the tagger keeps caught {aside[(y == 0) & kept].mean():.3f} "
            f"of {int(((y == 0) & kept).sum())}, "
            f"content lost {int((aside & (y == 1)).sum())} of {int(y.sum())} (twins' {int((aside & twin).sum())})"
        )
    if args.write:
        evidence = settings.judging.evidence
        aside = AsideWeights(bias=round(float(fit.intercept_[0]), 3), below=args.below, **weights)
        framing = evidence.framing.model_copy(update={"aside": aside})
        auc = round(float(roc_auc_score(y, predicted)), 3)
        record = fit_record(list(splits), constraints=len(rows), auc=auc, below=args.below)
        write_fitted(FITTED_WEIGHTS, evidence.model_copy(update={"framing": framing}), {"aside": record})
        print(f"wrote {FITTED_WEIGHTS}")


if __name__ == "__main__":
    main()
