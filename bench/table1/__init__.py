"""The paper's Table 1 through the training binaries, shared by `bench.launch` (which plans and
runs the rows) and `bench.analysis table1` (which reports them):

* `rows`: what each row trains (RunConfig settings), the paper's figures, the pairs compared;
* `results`: the finished runs on disk (<out>/<setting>/<row>/seed<k>, or an older tree's
  <out>/<budget>/<setting>/<row>/seed<k>);
* `report`: per-row statistics, paired differences and the markdown report;
* `plots`: learning curves and recall by popularity decile.
"""
