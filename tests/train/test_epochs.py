"""train.epochs: the one epoch loop of both binaries, on a fake trainer (no framework): early
stopping, the history and report line, the deferred reads of the step values, the non-finite
stop naming the failing step, the time budget, the phases; and both trainers run on it."""

import math
import time
import types

import pytest

from train import epochs


class FakeTrainer:
  """Scripted losses per epoch and validation NDCG@10 per epoch; records the calls."""

  def __init__(
    self, losses, ndcgs, patience=2, max_epochs=10, budget=0.0, steps=4, checkpoint_every=0.0
  ):
    self.cfg = types.SimpleNamespace(
      epochs=max_epochs,
      early_stopping_patience=patience,
      time_budget_minutes=budget,
      test_curve=False,
      progress=False,
      checkpoint_every_seconds=checkpoint_every,
    )
    self.steps_per_epoch = steps
    self.losses, self.ndcgs = losses, ndcgs
    self.state = dict(epoch=0, step=0, best_metric=-1.0, best_epoch=0, bad_epochs=0)
    self.calls, self.reported, self.read = [], [], []
    self.summaries = types.SimpleNamespace(
      scalars=lambda step, values: self.read.append(step), epoch=lambda *a: None
    )

  def get_state(self):
    return dict(self.state)

  def set_state(self, **values):
    self.state.update(values)

  def report(self, line):
    self.reported.append(line)

  def begin_epoch(self, e):
    self.calls.append(("begin", e))

  def epoch_steps(self, e):
    for loss in self.losses[e]:
      self.state["step"] += 1
      self.calls.append(("step", self.state["step"]))
      yield loss, 1.0, self.state["step"]

  def validate(self, split):
    e = self.state["epoch"]
    return {
      "recall@10": 0.1,
      "recall@20": 0.2,
      "ndcg@10": self.ndcgs[e],
      "ndcg@20": 0.1,
      "num_queries": 5,
    }

  def save_best(self, epoch):
    self.calls.append(("best", epoch))

  def save_checkpoint(self, history):
    self.calls.append(("ckpt", len(history)))

  def checkpoint_info(self):
    return None if self.state["epoch"] == 0 else (self.state["epoch"], self.state["step"], "ck")

  def pause(self, seconds):
    return dict(paused=True, epochs_done=self.state["epoch"])

  def progbar(self, steps):
    return types.SimpleNamespace(update=lambda n, values: None)


def test_early_stopping_history_and_best():
  t = FakeTrainer([[1.0] * 4] * 10, [0.1, 0.3, 0.2, 0.25, 0.29], patience=3)
  history = []
  assert epochs.EpochLoop(t, read_every=3).run(history, started=0.0) is None
  assert [h["epoch"] for h in history] == [1, 2, 3, 4, 5]  # stops 3 epochs after epoch 2
  assert t.state["best_epoch"] == 2 and t.state["bad_epochs"] == 3
  assert [c for c in t.calls if c[0] == "best"] == [("best", 1), ("best", 2)]
  assert history[1]["step"] == 8 and history[1]["val_ndcg@10"] == 0.3
  assert "*best*" in t.reported[1] and "*best*" not in t.reported[2]
  assert t.read == list(range(1, 21))  # every step read, in order
  assert epochs.best_step(history, 2) == 8 and epochs.best_step(history, 9) is None


def test_values_are_read_every_k_steps_not_after_each():
  """The loop pulls ``read_every`` steps from the trainer before reading any (host syncs)."""
  t = FakeTrainer([[1.0] * 7], [0.1], max_epochs=1)
  order = []
  t.summaries.scalars = lambda step, values: order.append(("read", step))
  steps = t.epoch_steps

  def logged(e):
    for item in steps(e):
      order.append(("run", item[2]))
      yield item

  t.epoch_steps = logged
  epochs.EpochLoop(t, read_every=3).run([], started=0.0)
  assert order == [
    ("run", 1),
    ("read", 1),  # the first step alone
    ("run", 2),
    ("run", 3),
    ("run", 4),
    ("read", 2),
    ("read", 3),
    ("read", 4),
    ("run", 5),
    ("run", 6),
    ("run", 7),
    ("read", 5),
    ("read", 6),
    ("read", 7),
  ]


def test_non_finite_names_the_first_failing_step_and_saves_nothing():
  t = FakeTrainer([[1.0] * 4, [1.0, 1.0, math.nan, math.inf]], [0.1, 0.2])
  with pytest.raises(epochs.NonFiniteError) as err:
    epochs.EpochLoop(t, read_every=10).run([], started=0.0)
  assert err.value.step == 7 and err.value.epoch == 2
  assert err.value.checkpoint == (1, 8, "ck")
  assert "step 7 (epoch 2)" in str(err.value) and "epoch 1 (step 4" not in str(err.value)
  assert [c for c in t.calls if c[0] == "ckpt"] == [("ckpt", 1)]  # epoch 2 never saved
  assert t.state["epoch"] == 1


def test_time_budget_pauses_before_an_epoch_that_would_not_fit():
  t = FakeTrainer([[1.0] * 4] * 10, [0.1 * i for i in range(1, 11)], budget=1e-9)
  out = epochs.EpochLoop(t).run([], started=0.0)
  assert out == dict(paused=True, epochs_done=1)  # the first epoch always runs


def test_time_budget_estimates_the_next_epoch_without_the_first_step():
  """A first step of 0.6 s (compilation) and instant other steps, a 1 s budget: the next
  epochs are estimated at ~0 s, not at the first epoch's 0.6 s, so the run goes on."""
  t = FakeTrainer([[1.0] * 4] * 5, [0.1 * i for i in range(1, 6)], budget=1.0 / 60, max_epochs=5)
  steps = t.epoch_steps

  def slow_first_step(e):
    for i, item in enumerate(steps(e)):
      if e == 0 and i == 0:
        time.sleep(0.6)
      yield item

  t.epoch_steps = slow_first_step
  out = epochs.EpochLoop(t).run([], started=time.time())
  assert out is None and t.state["epoch"] == 5  # finished: no pause after the first epoch


class Clock:
  """time.monotonic advanced by each epoch's begin_epoch (``per_epoch`` seconds)."""

  def __init__(self, t, per_epoch):
    self.now = 0.0
    begin = t.begin_epoch

    def ticking(e):
      self.now += per_epoch
      begin(e)

    t.begin_epoch = ticking

  def __call__(self):
    return self.now


def test_checkpoint_every_seconds_skips_epochs_and_saves_the_last(monkeypatch):
  """Epochs of 10 s, a checkpoint at most every 25 s: epochs 3, 6 and 9 (30 s after the last),
  then the last epoch (the early stop, 10 s later); the best weights at every improvement."""
  t = FakeTrainer(
    [[1.0] * 4] * 10,
    [0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.5, 0.5, 0.5],
    patience=3,
    checkpoint_every=25.0,
  )
  monkeypatch.setattr(epochs.time, "monotonic", Clock(t, 10.0))
  history = []
  assert epochs.EpochLoop(t).run(history, started=0.0) is None
  assert len(history) == 10
  assert [c for c in t.calls if c[0] == "ckpt"] == [
    ("ckpt", 3),
    ("ckpt", 6),
    ("ckpt", 9),
    ("ckpt", 10),
  ]
  assert [c[1] for c in t.calls if c[0] == "best"] == [1, 2, 3, 4, 5, 6, 7]


def test_checkpoint_every_seconds_zero_saves_every_epoch(monkeypatch):
  t = FakeTrainer([[1.0] * 4] * 4, [0.1, 0.2, 0.3, 0.4], max_epochs=4)
  monkeypatch.setattr(epochs.time, "monotonic", Clock(t, 1000.0))
  epochs.EpochLoop(t).run([], started=0.0)
  assert [c[1] for c in t.calls if c[0] == "ckpt"] == [1, 2, 3, 4]


def test_a_pause_writes_the_skipped_checkpoint_first(monkeypatch):
  """Epochs of 10 s, a budget of 1 min: the loop pauses after epoch 6, whose checkpoint the
  interval skipped; it is written before the pause, so the rerun continues from epoch 6."""
  t = FakeTrainer(
    [[1.0] * 4] * 10, [0.1 * i for i in range(1, 11)], budget=1.0, checkpoint_every=1e9
  )
  clock = Clock(t, 10.0)
  monkeypatch.setattr(epochs.time, "monotonic", clock)
  monkeypatch.setattr(epochs.time, "time", clock)
  out = epochs.EpochLoop(t).run([], started=0.0)
  assert out == dict(paused=True, epochs_done=6)
  assert [c for c in t.calls if c[0] == "ckpt"] == [("ckpt", 6)]


def test_phases_are_recorded():
  t = FakeTrainer([[1.0] * 4] * 2, [0.1, 0.2], max_epochs=2)
  phases = epochs.Phases()
  epochs.EpochLoop(t, phases).run([], started=0.0)
  got = phases.as_dict()
  assert set(epochs.Phases.NAMES) <= set(got) and all(v >= 0 for v in got.values())
  with phases("test"):
    pass
  assert phases.as_dict()["test"] >= got["test"]


def test_both_binaries_use_the_one_loop():
  import ast
  import pathlib

  root = pathlib.Path(__file__).resolve().parents[2]
  for path in ("train/trainer.py", "train/keras3/trainer.py"):
    tree = ast.parse((root / path).read_text())
    classes = {n.name for n in ast.walk(tree) if isinstance(n, ast.ClassDef)}
    assert "NonFiniteError" not in classes, path  # defined once, in train.epochs
    source = (root / path).read_text()
    assert "epochs.EpochLoop(self" in source, path
    assert "def _train_epoch" not in source, path


def test_prefetch_keeps_the_items_and_raises_the_producers_error():
  assert list(epochs.prefetch(iter(range(50)), depth=3)) == list(range(50))

  def failing():
    yield 1
    raise ValueError("bad batch")

  got = []
  with pytest.raises(ValueError, match="bad batch"):
    for x in epochs.prefetch(failing()):
      got.append(x)
  assert got == [1]
  it = epochs.prefetch(iter(range(10**6)), depth=2)
  assert next(it) == 0
  it.close()  # the producer stops; nothing hangs


def test_shape_log_counts_each_new_shape_once():
  import numpy as np

  lines = []
  log = epochs.ShapeLog(lines.append)
  a = dict(inputs=np.zeros((4, 5)), token_rows=np.zeros(7))
  assert log.seen(a, 1) and not log.seen(dict(a), 2)
  assert log.seen(dict(inputs=np.zeros((4, 5)), token_rows=np.zeros(9)), 3)
  assert [s["step"] for s in log.shapes] == [1, 3] and len(lines) == 2
  assert "new input shape #2" in lines[1]


@pytest.fixture
def sigint_handler():
  """Python's own SIGINT handler for the test, whatever the suite was started with (a shell
  starts a background job with SIGINT ignored); the previous handler afterwards."""
  import signal

  before = signal.signal(signal.SIGINT, signal.default_int_handler)
  yield
  signal.signal(signal.SIGINT, before)


def test_ctrl_c_takes_effect_after_the_running_step_and_a_second_one_at_once(sigint_handler):
  """SIGINT inside step 2: the step finishes, step 3 never starts, KeyboardInterrupt leaves the
  loop; Python's handler is back afterwards. Two SIGINTs inside one step: the second raises
  inside it."""
  import os
  import signal

  t = FakeTrainer([[1.0, 1.0, 1.0, 1.0]], [0.1], max_epochs=1)
  inner = t.epoch_steps

  def interrupted(e, times=1):
    for i, item in enumerate(inner(e)):
      if i == 1:
        for _ in range(times):
          os.kill(os.getpid(), signal.SIGINT)
          time.sleep(0.01)  # the handler runs in the main thread's next bytecodes
        t.calls.append(("after kill", item[2]))
      yield item

  t.epoch_steps = interrupted
  with pytest.raises(KeyboardInterrupt):
    epochs.EpochLoop(t).run([], time.time())
  assert [c for c in t.calls if c[0] != "begin"] == [("step", 1), ("step", 2), ("after kill", 2)]
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler

  t = FakeTrainer([[1.0, 1.0, 1.0, 1.0]], [0.1], max_epochs=1)
  inner = t.epoch_steps
  t.epoch_steps = lambda e: interrupted(e, times=2)
  with pytest.raises(KeyboardInterrupt):
    epochs.EpochLoop(t).run([], time.time())
  assert ("after kill", 2) not in t.calls and ("step", 2) in t.calls
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_an_ignored_sigint_stays_ignored():
  """A process started with SIGINT ignored (`nohup cmd &`) keeps ignoring it: the loop installs
  no handler and trains to the end."""
  import os
  import signal

  before = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    t = FakeTrainer([[1.0, 1.0, 1.0]], [0.1], max_epochs=1)
    inner = t.epoch_steps

    def interrupted(e):
      for i, item in enumerate(inner(e)):
        if i == 0:
          assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
          os.kill(os.getpid(), signal.SIGINT)
          time.sleep(0.01)
        yield item

    t.epoch_steps = interrupted
    epochs.EpochLoop(t).run([], time.time())
    assert [c for c in t.calls if c[0] == "step"] == [("step", 1), ("step", 2), ("step", 3)]
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
  finally:
    signal.signal(signal.SIGINT, before)
