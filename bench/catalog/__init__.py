"""The parts of bench/catalog_size.py: `parameter_server`, its cluster side (--parameter_server)."""
