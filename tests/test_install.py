"""Installable without the repository: a wheel in a fresh venv, run from an empty folder."""

import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import httpx

from rag.index.corpus import load_corpus

from .conftest import ROOT, SEEDS, Server


def run(*args, **kwargs) -> subprocess.CompletedProcess:
    out = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=600, **kwargs)
    assert out.returncode == 0, out.stdout + out.stderr
    return out


def test_a_wheel_installed_outside_the_checkout_indexes_and_answers(tmp_path):
    """The wheel is built from the checkout and installed with pip into a new venv; the packages
    it depends on come from this venv (a .pth file: no registry needed), so pip still checks
    that each of its requirements is met. Then, from a folder with nothing in it, `rag index --seeds DIR`
    and `rag ask` work with the corpus and the index where the user put them."""
    run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp_path / "dist", ROOT)
    wheel = next((tmp_path / "dist").glob("icml_rag-*.whl"))
    venv = tmp_path / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)  # no setuptools of its own to shadow ours
    python = venv / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (Path(site) / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    pip = [sys.executable, "-m", "pip", "--python", python]
    run(*pip, "install", "-q", "--no-index", wheel)  # fails if any requirement of ours is unmet

    work = tmp_path / "somewhere"
    work.mkdir()
    corpus = tmp_path / "my-corpus"
    corpus.mkdir()
    for path in sorted(SEEDS.glob("*.txt"))[:2]:
        shutil.copy(path, corpus)
    rag = venv / "bin" / "rag"
    env = {"PATH": f"{venv / 'bin'}:/usr/bin:/bin", "HOME": str(tmp_path), "RAG_MULTILINGUAL": "false"}
    version = run(rag, "--version", cwd=work, env=env).stdout
    built = run(rag, "index", "-q", "--seeds", corpus, cwd=work, env=env)
    assert (work / "index" / "current" / "manifest.json").is_file(), built.stdout
    answer = run(
        python,
        "-m",
        "server.cli",
        "ask",
        "What does Spiral RoPE change?",
        cwd=work,
        env={**env, "RAG_SEEDS_DIR": str(corpus)},
    )
    assert "Spiral RoPE" in answer.stdout and "[1]" in answer.stdout
    assert version.startswith("rag ")

    served = Server(
        env,
        tmp_path / "serve.log",
        cwd=work,
        args=[str(rag), "serve", "--seeds", str(corpus), "--host", "127.0.0.1", "--port", "{port}"],
    )
    try:
        assert served.last_health.json()["papers"] == len(load_corpus(corpus))
        page = httpx.get(served.url + "/")
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert httpx.get(served.url + "/static/app.js").status_code == 200  # package data in the wheel
    finally:
        served.stop()
