"""The parts of `bench/reproduce.py` (the paper's Table 1 through the training binaries):

* `rows`: what each row trains (RunConfig settings), the paper's figures, the pairs compared;
* `results`: the finished runs on disk (layout <out>/<budget>/<setting>/<row>/seed<k>);
* `report`: per-row statistics, paired differences and the markdown report;
* `plots`: learning curves and recall by popularity decile.
"""
