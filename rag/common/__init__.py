"""The bottom layer: settings, typed errors, request limits, optional parts and text helpers.

Imports nothing of `rag`; every other stage may import it.
"""
