r"""The core of tfrs_logq: every formula of the library, written once, for any array backend.

Both fronts call it: the tf-keras front (``tfrs_logq.tf_keras.losses``, ``log_q``,
``accidental_hits``, ``tasks``, ``frequency``, ``negatives``) with ``core.ops.tf_ops()``, the Keras
3 front (``tfrs_logq.keras3``) with ``keras.ops``. A front keeps only what is specific to its
framework: layers, variables and state, serialisation, distribution, dtype plumbing and value checks
on tensors. Nothing here imports TensorFlow or Keras (``tf_ops`` imports TensorFlow when called).

Notation (one meaning everywhere): a row is a query u with positive p; s_p = s(u, p) is the
positive score, s_i = s(u, d_i) the scores of its negatives d_1..d_N (already divided by the
temperature); log Q(d) is the per-draw log sampling probability (sums to 1 over the catalog);
``valid[i]`` says whether negative i takes part and n is the number of valid negatives of the
row; LSE is the log-sum-exp over the valid negatives; sg is stop-gradient, sigma the logistic
sigmoid, softplus(x) = log(1 + e^x).

Modules (each states its formulas in its docstring):

* ``ops``: the array namespace the formulas are written against; ``tf_ops()``.
* ``checks``: the argument vocabularies and checks (plain Python / numpy, same errors on both
  fronts): corrections, q_prime, ratio_floor, counts table, hash array, catalog, retrieval
  inputs, ``resolve_log_q``.
* ``log_q``: log(1 - e^x), Q' = Q / (1 - Q(p)) in log space, the inclusion probability of a
  pool of B draws, log Q from a probability.
* ``sampled_softmax``: the masked LSE and the four corrections (none | standard |
  standard_no_positive | corrected: w, P̂, Q', ratio floor); full softmax is ``none`` over every
  other candidate.
* ``bce``: BCE and gBCE, gSASRec's beta.
* ``negatives``: log Q of in-batch and mixed negatives under the unigram / mixture /
  expected-count conventions.
* ``frequency``: the exact-counts and hash-array estimators' update and read formulas.
* ``count_min``: the count-min sketch's shape, checks, (conservative, decayed) update and read.
* ``accidental_hits``: the hit mask and the lowest finite logit of a dtype.
* ``retrieval``: the task's shared steps: the in-batch valid mask, the positives, the sampler
  block's log Q under each correction and the join, hardest-k, the loss -> reduction map and the
  weighted reduction.
* ``cross_batch``: the cross-batch memory (FIFO slots, newest-first read order, its log Q under
  unigram / expected_count over the pushes' draws) and the rebase of a joined block's log Q.
* ``kmeans``: Lloyd's k-means (assignment, update, initialisation) of the MIDX codebooks.
* ``midx``: the MIDX inverted multi-index (codes -> cells, counts, offsets, sorted items) and
  proposal (codeword scores, cell log-weights, log Z, log Q(i|z), the item inside a cell), and
  the MIDX sampler's argument checks.
* ``lazy_adam``: LazyAdam's per-row update (the row's own count k_r in Adam's bias correction),
  on gathered rows (tf-keras) or on a whole table with a mask of the step's rows (Keras 3).
"""
