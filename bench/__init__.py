"""memd's benchmarks: each script runs as ``python -m bench.<name>`` from the repo root."""
