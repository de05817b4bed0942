"""`rag index --ray ADDRESS` on a real two-node Ray cluster, started and stopped by the test.

Ray binds the machine's interface address, not loopback, so the cluster and its driver run in
a network namespace the test makes (`unshare -n`): loopback is its only interface, and no
traffic leaves it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

import numpy as np
import pytest

from rag.common.settings import Settings
from rag.index.corpus import load_corpus
from rag.index.stores.faiss import load_index

from .conftest import ROOT, SEEDS

pytest.importorskip("ray")
pytestmark = pytest.mark.ray

BIN = Path(sys.executable).parent
# Inside `unshare -n -p -f --mount-proc`: loopback is the only interface, and the namespace's
# processes are only the test's own (its /proc is private), so `ray stop` stops these two
# nodes and nothing else on the machine; when the script ends the kernel ends whatever is left.
CLUSTER = """
set -e
ip link set lo up
export RAY_AUTH_MODE=token
trap 'ray stop --force > /dev/null 2>&1 || true' EXIT
node() { ray start --num-cpus 2 --disable-usage-stats --temp-dir "$RAY_TMP" "$@" > /dev/null; }
node --head --port 6390 --include-dashboard=false
node --address 127.0.0.1:6390
python -c 'import ray; ray.init(address="127.0.0.1:6390", logging_level="ERROR"); \
print("nodes:", sum(n["Alive"] for n in ray.nodes()), {n["NodeManagerAddress"] for n in ray.nodes()})'
python -m server.cli index --ray 127.0.0.1:6390 --ray-workers 2 --quiet
RAG_VECTOR_STORE=milvus python -m server.cli index --ray 127.0.0.1:6390 --ray-workers 2 --quiet
ray stop > /dev/null 2>&1
if pgrep -x raylet > /dev/null || pgrep -x gcs_server > /dev/null; then echo "ray still running"
else echo "both nodes stopped"; fi
"""


def _can_unshare() -> bool:
    return (
        shutil.which("unshare") is not None
        and subprocess.run(["unshare", "-n", "-p", "-f", "--mount-proc", "true"], capture_output=True).returncode == 0
    )


@pytest.mark.skipif(
    not _can_unshare(),
    reason="needs `unshare -n -p` (root) to keep Ray's traffic on loopback and its processes to the test",
)
def test_index_on_a_two_node_ray_cluster(tmp_path, loaded_index):
    seeds = tmp_path / "seeds"
    seeds.mkdir()
    for path in sorted(SEEDS.glob("*.txt"))[:2]:
        shutil.copy(path, seeds / path.name)
    env = {
        **os.environ,
        "PATH": f"{BIN}:{os.environ['PATH']}",
        "RAG_SEEDS_DIR": str(seeds),
        "RAG_INDEX_DIR": str(tmp_path / "index"),
        "RAG_MULTILINGUAL": "false",
        "RAG_MILVUS_URI": str(tmp_path / "milvus.db"),
        # `ray start` with token authentication (on by default in Ray 2.60) wants a token: the
        # test's own, given to every node and driver (nothing written to ~/.ray).
        "RAY_AUTH_TOKEN": uuid.uuid4().hex,
    }
    # A short path: Ray's Unix sockets live under it (at most 107 bytes a path).
    env["RAY_TMP"] = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    try:
        done = subprocess.run(
            ["unshare", "-n", "-p", "-f", "--mount-proc", "bash", "-c", CLUSTER],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )
    finally:
        shutil.rmtree(env["RAY_TMP"], ignore_errors=True)
    assert done.returncode == 0, done.stdout + done.stderr[-4000:]
    assert "nodes: 2 {'127.0.0.1'}" in done.stdout, done.stdout
    assert "both nodes stopped" in done.stdout, done.stdout
    papers = len(load_corpus(seeds))
    assert done.stdout.count(f"indexed {papers} papers") == 2, done.stdout

    # The vectors are the single-process build's (the session index holds the same papers).
    settings = Settings(index_dir=tmp_path / "index", seeds_dir=seeds, multilingual=False)
    on_ray = load_index(settings)
    assert on_ray.manifest["embedded_on"] == "ray"
    from rag.index.stores import milvus

    on_milvus = milvus.load(
        settings.model_copy(update={"vector_store": "milvus", "milvus_uri": str(tmp_path / "milvus.db")})
    )
    ids = [p.paper_id for p in on_ray.corpus.papers]
    expected = loaded_index.sentences_of(ids)
    for index in (on_ray, on_milvus):
        for pid, rows in index.sentences_of(ids).items():
            assert rows.texts == expected[pid].texts
            assert np.all(np.sum(rows.vectors * expected[pid].vectors, axis=1) >= 0.9999)

    # And the chunk vectors that are searched, in FAISS and in Milvus.
    single = loaded_index.dense.vectors()
    ray_chunks = on_ray.dense.vectors()
    milvus_chunks = {
        row["id"]: np.asarray(row["dense"])
        for row in on_milvus.client.query(
            on_milvus.names.of("chunks"), filter='paper_id != ""', output_fields=["id", "dense"], limit=1000
        )
    }
    assert len(ray_chunks) == len(milvus_chunks) == on_ray.chunks > 0
    for found in (ray_chunks, milvus_chunks):
        assert set(found) <= set(single)
        assert min(float(np.dot(vector, single[node_id])) for node_id, vector in found.items()) >= 0.9999
