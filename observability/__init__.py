"""The helper runtime's own Prometheus metrics (declarations; see metrics.py)."""
