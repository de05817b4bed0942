"""Smoke runs of the benchmarks at tiny sizes: they must keep working, and their figures be sane.

The real runs (`make bench`) take minutes and are not part of the test suite.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from rag.common.settings import Settings
from rag.index.topics import topic_counts

ROOT = Path(__file__).resolve().parent.parent


def run(module: str, *args: str) -> str:
    """`python -m bench.MODULE ARGS` from the repository root; its stdout."""
    done = subprocess.run(
        [sys.executable, "-m", f"bench.{module}", *args],
        cwd=ROOT,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def test_service_benchmark_smoke(index_dir, tmp_path):
    out = tmp_path / "service.json"
    printed = run("service", "--quick", "--index-dir", str(index_dir), "--out", str(out))
    report = json.loads(out.read_text())
    assert "/search HTTP p50" in printed and "target" in printed
    assert 0.3 < report["ingest"]["ratio"] < 3
    latency = report["latency"]
    for name in ("search_http", "search_in_process", "ask_http", "first_sse_token"):
        assert 0 < latency[name]["p50_ms"] <= latency[name]["p95_ms"] < 5000, name
    assert 0 < report["cold_start_s"] < 120 and 100 < report["peak_rss_mb_after_latency"] < 4096
    for workers in ("1_worker", "2_worker"):
        load = report["load"][workers]
        assert load["requests"] > 0 and load["errors"] == 0, load


def test_faiss_scale_smoke(tmp_path):
    out = tmp_path / "faiss.json"
    printed = run("faiss_scale", "--quick", "--out", str(out))
    entry = json.loads(out.read_text())["sizes"]["2000"]
    flat = next(r for r in entry["results"] if r["index"] == "IndexFlatIP")
    assert flat["recall_at_10"] == 1.0  # exact search is its own ground truth
    assert {r["index"] for r in entry["results"]} >= {"IndexFlatIP", "IndexHNSWFlat", "IndexIVFFlat"}
    assert all(0 <= r["recall_at_10"] <= 1 and r["p50_ms"] > 0 for r in entry["results"])
    assert entry["recommended"] and "recommended:" in printed


def test_topics_at_size_smoke():
    assert 19 in topic_counts(400, Settings())  # 15 to 60 by steps of about 4
    printed = run("topics_scale", "--papers", "400", "--centres", "19")
    pattern = r"the topic step ([\d.]+) s, peak RSS (\d+) MB .*; (\d+) topics .*, (\d+) set apart; .* centres ([\d.]+)$"
    found = re.search(pattern, printed)
    assert found, printed
    seconds, peak, topics, apart, rand = float(found[1]), int(found[2]), int(found[3]), int(found[4]), float(found[5])
    assert 0 < seconds < 120 and 50 < peak < 4096
    # 19 groups, found as 19 topics; every paper has its group, so none is set apart
    assert topics == 19 and apart == 0 and rand > 0.9, printed


def test_search_and_explore_at_size_smoke(index_dir, tmp_path):
    """Both on the same builds and servers: /search, the map and the similar papers at 86 and 160 papers."""
    out = tmp_path / "scale.json"
    printed = run(
        "scale", "--search", "--explore", "--papers", "160", "--rounds", "20", "--seed-index", str(index_dir),
        "--out", str(out),
    )  # fmt: skip
    report = json.loads(out.read_text())
    assert "160 papers: GET /map first" in printed
    last = printed.strip().splitlines()[-1]
    assert last.startswith("search p50: 86 papers ") and ", 160 papers " in last and ", ratio " in last
    for label, papers in (("86", 86), ("160", 160)):
        row = report[label]
        served = row["faiss"]
        assert 0 < served["p50_ms"] <= served["p95_ms"] < 5000 and 0 < served["start_s"] < 120
        assert 100 < served["VmRSS_mb"] < 4096 and row["index_mb"] > 0 and row["build_peak_rss_mb"] > 100
        assert 0 < row["map_s"] < 600 and row["map_peak_rss_mb"] >= row["map_rss_before_fit_mb"] > 50
        assert 0 < row["build_map_s"] < row["build_s"] and row["topics"] >= 2
        assert 0 < row["map_p50_ms"] < 5000 and 0 < row["similar_p50_ms"] <= row["similar_p95_ms"] < 5000
        assert 0 < row["map_gzip_bytes"] < row["map_json_bytes"] and row["map_json_bytes"] > 50 * papers
    assert report["160"]["index_mb"] > report["86"]["index_mb"]
    assert report["160"]["map_json_bytes"] > report["86"]["map_json_bytes"]


def test_profile_smoke(index_dir, tmp_path):
    py_spy = Path(sys.executable).with_name("py-spy")
    if not py_spy.exists():
        pytest.skip("py-spy is not installed (pip install -e '.[bench]')")
    run("profile_service", "--index-dir", str(index_dir), "--seconds", "3", "--out", str(tmp_path))
    report = json.loads((tmp_path / "profile.json").read_text())
    assert abs(sum(report["cold_start"].values()) - 1) < 0.01
    assert "import llama-index" in report["cold_start"]
    # Most of a search is the query embedding; a profile that misses it is broken.
    assert report["one_client"]["query embedding (MiniLM forward)"] > 0.3
    assert report["16_connections_load"]["errors"] == 0
