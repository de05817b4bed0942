"""The evaluation's scripts and data: the question splits in eval/data/ (dev and its variants to
tune on, test2 to test14 held out), the gate's floors in eval/thresholds.toml, and the scripts that
fit and study the answer path on dev. Run them from the repository root as modules:

    .venv/bin/python -m eval.calibrate   # fit the evidence weights and thresholds on dev
    .venv/bin/python -m eval.framing     # fit which missing constraints are framing
    .venv/bin/python -m eval.tagger      # fit the framing tagger and its threshold
    .venv/bin/python -m eval.contrast    # write eval/data/dev_contrast.jsonl
    .venv/bin/python -m eval.judge pairs # the judge experiment
    .venv/bin/python -m eval.llm         # `make eval-llm`: the evaluation with an LLM answering

`rag eval` (rag/evaluation/) runs the splits and checks the floors; nothing in rag/ or server/
imports this package.
"""
