"""Encryption of Temporal payloads, and the codec server that lets the Web UI show them to whoever may read them."""
