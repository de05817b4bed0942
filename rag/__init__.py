"""icml-rag: question answering with checked citations over the ICML 2026 abstracts."""

__version__ = "0.1.0"
