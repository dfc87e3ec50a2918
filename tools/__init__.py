"""Tools around the product, not part of it: the demo (`make run`, `make demo`: the local stack and its scenario)
and the benches (`make bench`)."""
