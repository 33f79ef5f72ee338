"""The embedded reference target: a small but genuine tensor-parallel speculative server."""
