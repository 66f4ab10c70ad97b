"""The launcher: an experiment file (`experiment`) planned into runs (`plan`) and run (`execute`)
by ``python -m bench.launch`` (`cli`)."""
