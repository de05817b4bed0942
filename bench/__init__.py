"""The benchmarks: the service's latency, load and memory, FAISS and the index at scale, the map's
topic step, reliability under interrupted adds, a profile of the running service, a real chat
UI against the service. Run them from the repository root as modules (`make bench` runs the main
ones): `.venv/bin/python -m bench.service`, `-m bench.scale`, `-m bench.faiss_scale`...
Nothing in rag/ or server/ imports this package."""
