"""Reliability figures, with the default settings (both models) on a copy of the seeds:

* catch-up vs full rebuild: `rag index --if-needed` after one seed file is added (and after
  one is removed) against `rag index` of the same corpus, process wall time, same run; then the
  same file added to a grown corpus (the seeds plus --grown synthetic abstracts, made of seed
  sentences): at 86 papers the file is a fifth of the corpus, at the sizes the service is meant
  for it is a small share, and the ratio shows whether a catch-up costs the change or the corpus;
* restart to healthy: `rag add` killed at each stage of its write, then the service started
  (uvicorn, as `rag serve` runs it): seconds from process start to /health 200;
* papers lost and duplicated after each kill and a retried add.

    .venv/bin/python -m bench.reliability      # about 15 minutes on 2 cores (--grown 0: 6)

Prints a table and writes bench/results/reliability.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

from bench.corpora import synthetic_abstracts, write_seed_file
from rag.index.corpus import load_corpus, paper_id_for, read_seed_file

ROOT = Path(__file__).resolve().parent.parent

STAGES = ["seed-written", "embedding", "writing", "before-publish", "after-publish"]


class Workspace:
    def __init__(self, root: Path):
        self.seeds, self.index = root / "seeds", root / "index"
        self.env = {
            **os.environ,
            "HF_HUB_OFFLINE": "1",
            "RAG_SEEDS_DIR": str(self.seeds),
            "RAG_INDEX_DIR": str(self.index),
        }

    def rag(self, *args) -> float:
        """Run `rag ARGS`; its wall time in seconds."""
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "server.cli", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        return time.perf_counter() - started

    def killed_add(self, path: Path, stage: str) -> None:
        proc = subprocess.Popen(
            [sys.executable, "-m", "server.cli", "add", str(path)],
            cwd=ROOT,
            env={**self.env, "RAG_PAUSE_AT": stage},
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        marker = self.index / f".paused-{stage}"
        while not marker.exists():
            if proc.poll() is not None:
                raise RuntimeError(f"rag add exited before {stage}")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        marker.unlink()

    def time_to_healthy(self) -> tuple[float, dict]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        started = time.perf_counter()
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "server.app:create_app",
                "--factory",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            while True:
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                    if health.status_code == 200:
                        return time.perf_counter() - started, health.json()
                except httpx.TransportError:
                    pass
                if time.perf_counter() - started > 300:
                    raise RuntimeError("the service never became healthy")
                time.sleep(0.05)
        finally:
            proc.terminate()
            proc.wait()

    def papers(self) -> tuple[set[str], int, int]:
        """The index's paper ids, its paragraph count, and the seed folder's paragraph count."""
        manifest = json.loads((self.index / "current" / "papers.json").read_text())
        return ({p["paper_id"] for p in manifest["papers"]}, manifest["paragraphs"], load_corpus(self.seeds).paragraphs)


def grown_catch_up(held_back: Path, synthetic: int) -> dict:
    """The held-back file added to the other seed files plus `synthetic` abstracts: the catch-up
    against a full rebuild of the corpus it produces."""
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp))
        ws.seeds.mkdir()
        for path in sorted((ROOT / "seeds").glob("*.txt")):
            if path.name != held_back.name:
                shutil.copy(path, ws.seeds)
        write_seed_file(ws.seeds, synthetic_abstracts(synthetic))
        ws.rag("index", "-q")
        shutil.copy(held_back, ws.seeds)
        added = ws.rag("index", "--if-needed")
        embedded = json.loads((ws.index / "current" / "manifest.json").read_text())["embedded"]
        full = ws.rag("index", "-q")
        return {
            "papers": len(load_corpus(ws.seeds)),
            "full_rebuild_s": round(full, 1),
            "one_file_added_s": round(added, 1),
            "ratio_one_file": round(added / full, 3),
            "catch_up_embedded": embedded,
        }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--grown",
        type=int,
        default=400,
        help="synthetic abstracts of the grown corpus for the second catch-up figure (0: skip)",
    )
    args = parser.parse_args()
    seed_files = sorted((ROOT / "seeds").glob("*.txt"))
    held_back = seed_files[-1]
    results: dict = {"python": sys.version.split()[0], "cpus": os.cpu_count()}
    with tempfile.TemporaryDirectory() as tmp:
        ws = Workspace(Path(tmp))
        ws.seeds.mkdir()
        for path in seed_files:
            shutil.copy(path, ws.seeds)
        full = [ws.rag("index", "-q") for _ in range(2)]
        everything = load_corpus(ws.seeds)

        (ws.seeds / held_back.name).unlink()
        four = load_corpus(ws.seeds)
        one_file_papers = len(everything) - len(four)
        removed = ws.rag("index", "--if-needed")
        shutil.copy(held_back, ws.seeds)
        added = ws.rag("index", "--if-needed")
        # A small file: five of the held-back file's new abstracts, the rest of it gone again.
        (ws.seeds / held_back.name).unlink()
        ws.rag("index", "--if-needed")
        header = held_back.read_text().split("\n", 1)[0]
        (ws.seeds / "five.txt").write_text(
            "\n\n".join(
                [header, *[r.text for r in read_seed_file(held_back) if paper_id_for(r.text) not in four.by_id][:5]]
            )
            + "\n"
        )
        five = ws.rag("index", "--if-needed")
        results["catch_up"] = {
            "full_rebuild_s": round(statistics.median(full), 1),
            "one_file_added_s": round(added, 1),
            "one_file_papers": one_file_papers,
            "five_papers_added_s": round(five, 1),
            "one_file_removed_s": round(removed, 1),
            "ratio_one_file": round(added / statistics.median(full), 3),
            "ratio_five_papers": round(five / statistics.median(full), 3),
        }
        (ws.seeds / "five.txt").unlink()
        ws.rag("index", "--if-needed")

        restarts, lost, duplicated = {}, 0, 0
        for stage in STAGES:
            before, _, _ = ws.papers()
            ws.killed_add(held_back, stage)
            seconds, _ = ws.time_to_healthy()
            lost += len(before - ws.papers()[0])  # published before the kill, gone after it
            restarts[stage] = round(seconds, 2)
            ws.rag("add", str(held_back))  # the retry
            ids, index_paragraphs, seed_paragraphs = ws.papers()
            lost += len(everything.by_id.keys() - ids)
            # An abstract written twice into the folder or the index shows as extra paragraphs.
            duplicated += max(0, seed_paragraphs - everything.paragraphs) + max(
                0, index_paragraphs - everything.paragraphs
            )
            for added_file in ws.seeds.glob("added-*.txt"):  # back to the four files for the next kill
                added_file.unlink()
            ws.rag("index", "--if-needed")
        results["restart_to_healthy_s"] = restarts
        results["restart_to_healthy_median_s"] = round(statistics.median(restarts.values()), 2)
        results["papers_lost"], results["papers_duplicated"] = lost, duplicated

    if args.grown:
        results["catch_up_grown"] = grown_catch_up(held_back, args.grown)

    c = results["catch_up"]
    print(f"full rebuild ({len(everything)} papers, `rag index`)        {c['full_rebuild_s']:>6.1f} s")
    print(
        f"catch-up, one file of {c['one_file_papers']} papers added         {c['one_file_added_s']:>6.1f} s"
        f"  ({c['ratio_one_file']:.0%} of the rebuild)"
    )
    print(
        f"catch-up, one file of 5 papers added           {c['five_papers_added_s']:>6.1f} s"
        f"  ({c['ratio_five_papers']:.0%})"
    )
    print(f"catch-up, one file removed                     {c['one_file_removed_s']:>6.1f} s")
    if "catch_up_grown" in results:
        g = results["catch_up_grown"]
        print(
            f"grown corpus ({g['papers']} papers): full rebuild {g['full_rebuild_s']:.1f} s, "
            f"catch-up for the same file "
            f"{g['one_file_added_s']:.1f} s  ({g['ratio_one_file']:.0%} of the rebuild)"
        )
    for stage, seconds in results["restart_to_healthy_s"].items():
        print(f"restart to healthy, add killed at {stage:<15}{seconds:>6.2f} s")
    print(f"papers lost {results['papers_lost']}, duplicated {results['papers_duplicated']}")
    out = ROOT / "bench" / "results" / "reliability.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"-> {out.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
