"""The worker replica's own parts, which `worker.py` runs beside its Temporal workers: its health and metrics
endpoint for the probes and Prometheus (`health`), its liveness record in the store, through which the others
take over its follows should it go silent (`liveness`), and what its garbage collector scans (`collector`)."""
