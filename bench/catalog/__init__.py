"""The parts of bench/catalog_size.py: `points` (one measured step per variant and size,
shared) and `parameter_server`, its cluster side (--parameter_server)."""
