"""From raw interactions (user, item, timestamp) to `SequenceData`: k-core filtering, id
renumbering, the leave-one-out split and the global temporal split.

Ordering: interactions are ordered by timestamp with a stable tie-break on their position in the
input (file order), per user for leave-one-out and globally for the temporal split.

k-core ("5-core as in SASRec"): keep only interactions whose user and item both have at least
`min_count` interactions. With `iterate=True` (default) the filter is repeated until nothing
changes, so that *every* remaining user and item has >= min_count interactions. With
`iterate=False` it is one pass over the original counts (what SASRec's preprocessing script
does); then some users or items can drop below min_count after the pass.

Ids are renumbered 1..n in increasing order of the original id (users and items separately);
`metadata["item_original_ids"][i - 1]` is the original id of item i (same for users).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from train.data.records import EvalSplit, SequenceData, count_items


def k_core_mask(
  users: np.ndarray, items: np.ndarray, *, min_count: int = 5, iterate: bool = True
) -> np.ndarray:
  """Boolean mask of the interactions kept by the k-core filter (see module docstring).

  One pass keeps row r iff  #interactions(users[r]) >= k  and  #interactions(items[r]) >= k,
  counted over the rows still kept; `iterate` repeats passes until a fixed point.
  """
  users = np.asarray(users)
  items = np.asarray(items)
  if users.shape != items.shape or users.ndim != 1:
    raise ValueError(f"users {users.shape} and items {items.shape} must be equal 1-D arrays")
  keep = np.ones(users.shape[0], dtype=bool)
  if min_count <= 1:
    return keep
  _, uinv = np.unique(users, return_inverse=True)
  _, iinv = np.unique(items, return_inverse=True)
  while True:
    ucount = np.bincount(uinv[keep], minlength=uinv.max() + 1 if uinv.size else 0)
    icount = np.bincount(iinv[keep], minlength=iinv.max() + 1 if iinv.size else 0)
    new_keep = keep & (ucount[uinv] >= min_count) & (icount[iinv] >= min_count)
    changed = new_keep.sum() != keep.sum()
    keep = new_keep
    if not iterate or not changed:
      return keep


def renumber(ids: np.ndarray) -> tuple:
  """Maps ids to 1..n in increasing order of the original id. Returns (new_ids, originals)."""
  originals, inverse = np.unique(np.asarray(ids), return_inverse=True)
  return inverse.astype(np.int64) + 1, originals


def _group_by_user(values_sorted_list, uid_sorted):
  """Splits arrays sorted by user into per-user lists; returns (user ids, [lists...])."""
  users, starts = np.unique(uid_sorted, return_index=True)
  out = [np.split(v, starts[1:]) if v.size else [] for v in values_sorted_list]
  return users, out


def leave_one_out(
  uid: np.ndarray,
  iid: np.ndarray,
  ts: np.ndarray,
  *,
  num_val_users: Optional[int] = None,
  val_seed: int = 42,
) -> dict:
  """Per user, time-ordered (stable tie-break by input order): last item = test target,
  second to last = validation target.

  * test query: input = items[:-1], target = items[-1] (every user with >= 2 interactions).
  * validation query: input = items[:-2], target = items[-2] (users with >= 3 interactions,
    restricted to the validation users when `num_val_users` is set).
  * training sequence: items[:-2] for validation users, items[:-1] for the others (all users
    are validation users when `num_val_users` is None; users with one interaction only train).

  `num_val_users` follows the gSASRec protocol: the validation users are the values of
  `numpy.random.RandomState(val_seed).choice(num_users, num_val_users, replace=False)` taken as
  1-based user ids (a drawn 0 matches no user, so there can be one fewer).

  Returns:
    dict(train=list, train_ts=list, train_users=array, val=EvalSplit, test=EvalSplit).
  """
  order = np.lexsort((np.arange(uid.size), ts, uid))
  users, (seqs, tss) = _group_by_user([iid[order], ts[order]], uid[order])
  if num_val_users is None:
    is_val_user = np.ones(users.size, dtype=bool)
  else:
    num_users = int(users.max()) if users.size else 0
    chosen = np.random.RandomState(val_seed).choice(num_users, num_val_users, replace=False)
    is_val_user = np.isin(users, chosen)
  train, train_ts, train_users = [], [], []
  val_in, val_t, val_u, val_ts = [], [], [], []
  test_in, test_t, test_u, test_ts = [], [], [], []
  for u, s, t, v in zip(users, seqs, tss, is_val_user):
    n = s.size
    if n >= 2:
      test_in.append(s[:-1])
      test_t.append(s[-1])
      test_u.append(u)
      test_ts.append(t[-1])
    cut = n - 1
    if v and n >= 3:
      val_in.append(s[:-2])
      val_t.append(s[-2])
      val_u.append(u)
      val_ts.append(t[-2])
      cut = n - 2
    cut = max(cut, 1)
    train.append(s[:cut])
    train_ts.append(t[:cut])
    train_users.append(u)
  return dict(
    train=train,
    train_ts=train_ts,
    train_users=np.array(train_users, np.int64),
    val=EvalSplit(
      val_in, np.array(val_t, np.int64), np.array(val_u, np.int64), np.array(val_ts, np.int64)
    ),
    test=EvalSplit(
      test_in, np.array(test_t, np.int64), np.array(test_u, np.int64), np.array(test_ts, np.int64)
    ),
  )


def temporal_split(
  uid: np.ndarray,
  iid: np.ndarray,
  ts: np.ndarray,
  *,
  fraction: float = 0.1,
  num_items: Optional[int] = None,
  drop_unseen_targets: bool = True,
  drop_empty_history: bool = True,
) -> dict:
  """Global temporal split.

  All N interactions are sorted by (timestamp, input order). With n = round(fraction * N):
  the last n form the test period, the n before them the validation period, the first
  N - 2n the training period. Hence every test timestamp >= every validation timestamp >=
  every training timestamp.

  * training sequences: per user, that user's training-period interactions (time order); users
    with none have no training sequence.
  * every validation / test interaction is one query: target = its item, input = ALL of that
    user's interactions earlier in the global order (training period, validation period and,
    for test queries, earlier test interactions too), oldest first.
  * `drop_unseen_targets`: drop queries whose target item never occurs in the training period
    (no model can have learned it; `metadata` counts them).
  * `drop_empty_history`: drop queries with an empty input (the user's first interaction
    overall, a cold-start user). Users unseen in training keep their later queries, whose input
    holds their validation/test-period history.
  Queries are listed in global time order.

  Returns:
    dict(train, train_ts, train_users, val, test, dropped=dict of counts, boundaries).
  """
  if not 0 < fraction < 0.5:
    raise ValueError(f"temporal fraction must be in (0, 0.5), got {fraction}")
  n_total = uid.size
  n_eval = int(round(fraction * n_total))
  if n_eval < 1 or n_total - 2 * n_eval < 1:
    raise ValueError(
      f"temporal split of {n_total} interactions with fraction {fraction} leaves an empty period"
    )
  gorder = np.lexsort((np.arange(n_total), ts))
  pos = np.empty(n_total, np.int64)
  pos[gorder] = np.arange(n_total)
  period = np.where(pos < n_total - 2 * n_eval, 0, np.where(pos < n_total - n_eval, 1, 2))
  order = np.lexsort((pos, uid))  # per user, global order
  users, (seqs, tss, periods, poss) = _group_by_user(
    [iid[order], ts[order], period[order], pos[order]], uid[order]
  )
  if num_items is None:
    num_items = int(iid.max())
  train, train_ts, train_users = [], [], []
  for u, s, t, p in zip(users, seqs, tss, periods):
    k = int(np.searchsorted(p, 1))  # periods are non-decreasing within a user
    if k:
      train.append(s[:k])
      train_ts.append(t[:k])
      train_users.append(u)
  counts = count_items(train, num_items)
  dropped = dict(
    val_unseen_target=0, val_empty_history=0, test_unseen_target=0, test_empty_history=0
  )
  queries = {1: [], 2: []}
  for u, s, t, p, q in zip(users, seqs, tss, periods, poss):
    for j in np.flatnonzero(p > 0):
      name = "val" if p[j] == 1 else "test"
      if drop_empty_history and j == 0:
        dropped[f"{name}_empty_history"] += 1
        continue
      if drop_unseen_targets and counts[s[j]] == 0:
        dropped[f"{name}_unseen_target"] += 1
        continue
      queries[int(p[j])].append((q[j], u, s[:j], s[j], t[j]))
  splits = {}
  for p, name in ((1, "val"), (2, "test")):
    rows = sorted(queries[p], key=lambda r: r[0])
    splits[name] = EvalSplit(
      [r[2] for r in rows],
      np.array([r[3] for r in rows], np.int64),
      np.array([r[1] for r in rows], np.int64),
      np.array([r[4] for r in rows], np.int64),
    )
  ts_sorted = ts[gorder]
  boundaries = dict(
    train_end_timestamp=int(ts_sorted[n_total - 2 * n_eval - 1]),
    val_end_timestamp=int(ts_sorted[n_total - n_eval - 1]),
    num_train=n_total - 2 * n_eval,
    num_val=n_eval,
    num_test=n_eval,
  )
  return dict(
    train=train,
    train_ts=train_ts,
    train_users=np.array(train_users, np.int64),
    val=splits["val"],
    test=splits["test"],
    dropped=dropped,
    boundaries=boundaries,
  )


def check_training_sequences(data: SequenceData, *, split: str, val_users: int = 0) -> None:
  """Raises ValueError unless some training sequence has >= 2 items, the least either model
  learns from (a next item after at least one earlier item), naming the length the split needs.

  Leave-one-out holds out each user's last item (the test target) and, for a validation user,
  the one before it: a user needs >= 4 interactions (>= 3 when not a validation user, under
  ``val_users``); the temporal split trains on the interactions before its validation period;
  a gSASRec folder's training file is used as it is.
  """
  lengths = [int(s.size) for s in data.train_sequences]
  if any(n >= 2 for n in lengths):
    return
  longest = max(lengths, default=0)
  if data.metadata.get("format") == "gsasrec":
    need = "each line of the training file needs >= 2 items"
  elif split == "leave_one_out":
    need = (
      "a user needs >= 4 interactions (the last is held out as the test target, the one "
      "before it as the validation target)"
    )
    if val_users:
      need = need[:-1] + "; >= 3 for a user outside the --val_users)"
  else:
    need = "a user needs >= 2 interactions before the validation period"
  raise ValueError(
    f"{data.metadata.get('source', data.name)}: no training sequence with >= 2 items under "
    f"--split={split}: {need}; the "
    f"longest training sequence has {longest} item{'s' if longest != 1 else ''}"
  )


def build_sequence_data(
  name: str,
  users,
  items,
  timestamps,
  *,
  split: str = "leave_one_out",
  min_count: int = 5,
  iterate_core: bool = True,
  temporal_fraction: float = 0.1,
  num_val_users: Optional[int] = None,
  val_seed: int = 42,
  drop_unseen_targets: bool = True,
  drop_empty_history: bool = True,
  renumber_ids: bool = True,
  num_items: Optional[int] = None,
  metadata: Optional[dict] = None,
) -> SequenceData:
  """k-core filter, renumber, split. See `k_core_mask`, `leave_one_out`, `temporal_split`.

  With `renumber_ids=False` the item ids must already be 1..num_items (the synthetic data).
  """
  users = np.asarray(users, np.int64).reshape(-1)
  items = np.asarray(items, np.int64).reshape(-1)
  timestamps = np.asarray(timestamps, np.int64).reshape(-1)
  if not users.shape == items.shape == timestamps.shape:
    raise ValueError(
      f"users {users.shape}, items {items.shape} and timestamps "
      f"{timestamps.shape} must have equal lengths"
    )
  meta = dict(metadata or {})
  meta.update(
    num_raw_interactions=int(users.size),
    min_count=min_count,
    iterate_core=iterate_core,
    split=split,
  )
  keep = k_core_mask(users, items, min_count=min_count, iterate=iterate_core)
  users, items, timestamps = users[keep], items[keep], timestamps[keep]
  if users.size == 0:
    raise ValueError(f"{name}: no interaction left after {min_count}-core filtering")
  meta["num_interactions"] = int(users.size)
  if renumber_ids:
    uid, meta["user_original_ids"] = renumber(users)
    iid, meta["item_original_ids"] = renumber(items)
    num_items = int(iid.max())
  else:
    uid, iid = users, items
    num_items = int(num_items if num_items is not None else iid.max())
  if split == "leave_one_out":
    parts = leave_one_out(uid, iid, timestamps, num_val_users=num_val_users, val_seed=val_seed)
  elif split == "temporal":
    parts = temporal_split(
      uid,
      iid,
      timestamps,
      fraction=temporal_fraction,
      num_items=num_items,
      drop_unseen_targets=drop_unseen_targets,
      drop_empty_history=drop_empty_history,
    )
    meta["dropped_queries"] = parts["dropped"]
    meta["boundaries"] = parts["boundaries"]
    meta["temporal_fraction"] = temporal_fraction
  else:
    raise ValueError(f"unknown split {split!r}: expected 'leave_one_out' or 'temporal'")
  data = SequenceData(
    name=name,
    num_items=num_items,
    train_sequences=parts["train"],
    val=parts["val"],
    test=parts["test"],
    item_counts=count_items(parts["train"], num_items),
    timestamps=parts["train_ts"],
    metadata=meta,
    user_ids=parts["train_users"],
  )
  return data
