"""The parameter-server side of bench/catalog_size.py (``--parameter_server``): one two-tower
point on a local cluster of ps processes and a worker, against the same point on one process.
Method and measured results: bench/README.md, section `catalog_size.py` (`--parameter_server`)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import numpy as np

from bench.catalog import points
from bench.catalog.points import fmt_size
from bench.common import memory
from bench.common.report import gib, markdown_header, markdown_row, summary_line

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VARIANT = "mixed+hash_array@lazy_adam"


def start_cluster(num_ps: int, num_workers: int = 1, timeout: float = 300.0):
  """Starts ``num_ps`` ps and ``num_workers`` worker processes on 127.0.0.1, each serving
  (`train.distribute.run_server`) until killed; returns (TF_CONFIG cluster dict with a "chief"
  address for the caller, {(task, index): Popen}) once every server accepts connections."""
  from train import distribute

  ports = distribute.free_ports(1 + num_workers + num_ps)
  cluster = {
    "chief": [f"127.0.0.1:{ports[0]}"],
    "worker": [f"127.0.0.1:{p}" for p in ports[1 : 1 + num_workers]],
    "ps": [f"127.0.0.1:{p}" for p in ports[1 + num_workers :]],
  }
  procs = {}
  for task in ("ps", "worker"):
    for i in range(len(cluster[task])):
      env = dict(
        os.environ,
        TF_CPP_MIN_LOG_LEVEL="3",
        CUDA_VISIBLE_DEVICES="",
        TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": task, "index": i}}),
      )
      procs[(task, i)] = subprocess.Popen(
        [sys.executable, "-c", "from train import distribute; distribute.run_server()"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
      )
  deadline = time.time() + timeout
  for (task, i), proc in procs.items():
    host, port = cluster[task][i].rsplit(":", 1)
    while True:
      if proc.poll() is not None:
        stop_cluster(procs)
        raise RuntimeError(f"{task} {i} exited ({proc.returncode}) before serving")
      try:
        socket.create_connection((host, int(port)), timeout=1).close()
        break
      except OSError:
        if time.time() > deadline:
          stop_cluster(procs)
          raise RuntimeError(f"{task} {i} not serving within {timeout:g} s") from None
        time.sleep(0.2)
  return cluster, procs


def stop_cluster(procs: dict) -> None:
  for proc in procs.values():
    if proc.poll() is None:
      proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=60)


def socket_bytes(pids) -> dict:
  """{pid: [bytes received, bytes sent]} summed over the TCP sockets of each process (the
  kernel's tcp_info counters, from ``ss -tinpH``)."""
  out = {pid: [0, 0] for pid in pids}
  text = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True, check=True).stdout
  owner = None
  for line in text.splitlines():
    if not line.startswith((" ", "\t")):  # a socket line: its owning processes
      owner = next((int(p) for p in re.findall(r"pid=(\d+)", line) if int(p) in out), None)
      continue
    if owner is not None:  # its tcp_info line
      got = re.search(r"bytes_received:(\d+)", line)
      sent = re.search(r"bytes_sent:(\d+)", line)
      out[owner][0] += int(got.group(1)) if got else 0
      out[owner][1] += int(sent.group(1)) if sent else 0
  return out


def ps_point(spec: dict) -> dict:
  """The point of ``spec`` on the cluster of ``spec["cluster"]`` (this process is its chief);
  ``spec["server_pids"]``: {"ps 0": pid, ...}. Returns the measurements."""
  os.environ["TF_CONFIG"] = json.dumps(
    {"cluster": spec["cluster"], "task": {"type": "chief", "index": 0}}
  )
  import tfrs_logq.tf_keras  # noqa: F401  (legacy Keras before TensorFlow loads)

  import tensorflow as tf

  from train import distribute

  tf.get_logger().setLevel("ERROR")
  strategy = distribute.parameter_server_strategy()
  coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
  with strategy.scope():
    built = points.build_point(spec)

  def moved(var, g):
    row = int(np.prod(var.shape[1:])) * var.dtype.size
    if isinstance(g, tf.IndexedSlices):  # rows gathered + the sparse gradient (and indices)
      return tf.size(g.indices, out_type=tf.int64) * (2 * row + 8)
    return tf.constant(2 * int(np.prod(var.shape)) * var.dtype.size, tf.int64)

  def payload(grads):
    return tf.add_n([moved(v, g) for g, v in zip(grads, built.variables) if g is not None])

  replica = points.step_fn(built, payload)
  train_step = tf.function(lambda batch: strategy.run(replica, args=(batch,)))

  def run(i):
    remote = coordinator.schedule(train_step, args=(built.batches[i % 4],))
    coordinator.join()
    return remote.fetch()

  pids = spec["server_pids"]
  ps_pids = [pid for name, pid in pids.items() if name.startswith("ps")]
  before, times, (value, computed) = points.timed_steps(run, spec, lambda: socket_bytes(ps_pids))
  after = socket_bytes(ps_pids)
  got, sent = (sum(after[p][k] - before[p][k] for p in ps_pids) for k in (0, 1))
  return dict(
    times=times,
    loss=value,
    shards=len(getattr(built.table, "variables", [built.table])),
    computed_bytes=int(computed),
    measured_bytes=(got + sent) / len(times),
    measured_received=got / len(times),
    chief_peak_kib=memory.status_kib("VmHWM"),
    chief_rss_kib=memory.status_kib("VmRSS"),
    servers={
      name: dict(peak_kib=memory.status_kib("VmHWM", pid), rss_kib=memory.status_kib("VmRSS", pid))
      for name, pid in pids.items()
    },
    table_bytes=int(np.prod(built.table.shape)) * 4,
    estimator_bytes=memory.weights_bytes(built.estimator),
  )


def project_memory(measured, target: float = 1e8):
  """Linear projection of a ps's resident set (KiB) to ``target`` items from [(|I|, KiB)]: the
  line through the two largest sizes (the per-item cost is the table's rows and slots)."""
  (n1, m1), (n2, m2) = sorted(measured)[-2:]
  slope = (m2 - m1) / (n2 - n1)
  return m2 + slope * (target - n2), slope


def _bytes(n) -> str:
  return f"{n / 2**10:.0f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


def report(results: dict, sizes, num_ps: int, dim: int = 64) -> tuple:
  """(markdown table lines, projection lines, summary) of {(side, |I|): measurements}."""
  ps_names = [f"ps {i}" for i in range(num_ps)]
  lines = markdown_header(
    [
      *"\\|I\\|;side;min ms;median ms;median / one-process".split(";"),
      *("peak RSS GiB: chief (or the process)", "worker", *ps_names, "ps RSS after steps GiB"),
      *("bytes / step measured (ps TCP)", "computed (rows + grads)", "item table GiB", "loss"),
    ]
  )
  parts, per_ps, chief = [], [], []
  for v in sizes:
    one = results.get(("one", v), {})
    for side in ("one", "ps"):
      m = results.get((side, v), {})
      if "times" not in m:
        lines.append(f"| {fmt_size(v)} | {side} | {m.get('error', 'not run')} |" + "|" * 11)
        continue
      ratio = "" if "times" not in one else f"{np.median(m['times']) / np.median(one['times']):.2f}"
      tail = [f"{m['table_bytes'] / 2**30:.3f}", f"{m['loss']:.3f}"]
      if side == "one":
        cells = ["one process", *points.time_cells(m), ratio, gib(m["peak_rss_kib"])]
        lines.append(markdown_row([fmt_size(v), *cells, *[""] * (num_ps + 4), *tail]))
        continue
      servers = m["servers"]
      per_ps.append((v, max(servers[n]["rss_kib"] for n in ps_names)))
      chief.append((v, m["chief_peak_kib"]))
      cells = [f"parameter server ({m['shards']} shards)", *points.time_cells(m), ratio]
      cells += [gib(m["chief_peak_kib"]), gib(servers["worker 0"]["peak_kib"])]
      cells += [*(gib(servers[n]["peak_kib"]) for n in ps_names)]
      cells += [" / ".join(gib(servers[n]["rss_kib"]) for n in ps_names)]
      cells += [_bytes(m["measured_bytes"]), _bytes(m["computed_bytes"])]
      lines.append(markdown_row([fmt_size(v), *cells, *tail]))
      if ratio:
        parts.append(f"{fmt_size(v)} ps/one {ratio}x, {_bytes(m['measured_bytes'])}/step")
  projection = []
  if len(per_ps) >= 2:
    kib, slope = project_memory(per_ps)
    state = (1e8 + 1) * (3 * dim * 4 + 4) / num_ps / 2**30  # table, m, v, row counts
    projection = [
      f"**Projection to \\|I\\| = 1e8 (not measured)**, {num_ps} ps: each ps's resident "
      f"set after the steps grows by {slope * 1e6 / 2**10:.0f} MiB per million items "
      f"(the line through the two largest sizes measured: "
      f"{', '.join(f'{fmt_size(v)}: {k / 2**20:.2f} GiB' for v, k in per_ps[-2:])}), "
      f"so about **{kib / 2**20:.0f} GiB per ps** at 1e8 "
      f"({kib * num_ps / 2**20:.0f} GiB over the {num_ps} ps). For comparison, the state "
      f"itself (item table, LazyAdam's m and v, its per-row counts: (3 d + 1) x 4 bytes per "
      f"item, d = {dim}) is {state:.0f} GiB per ps. The worker's memory does not grow with "
      f"\\|I\\|. The chief's peak: "
      f"{', '.join(f'{fmt_size(v)}: {k / 2**20:.2f} GiB' for v, k in chief[-2:])} "
      f"({project_memory(chief)[1] * 1e6 / 2**10:.0f} MiB per million items on the same "
      f"line, about {project_memory(chief)[0] / 2**20:.1f} GiB at 1e8): the chief builds "
      "the model with a traced dummy pass (`TwoTower.build_all`; an eager lookup of a sharded "
      "table would copy the whole table to the chief) and schedules steps; the training "
      "binary's validation and export still read the item table whole on the chief."
    ]
  summary = summary_line(
    parts or ["no point ran"],
    head="parameter server vs one process, median step",
    note="loaded 2-core CPU: ratios only",
  )
  return lines, projection, summary


def plot(results: dict, sizes, num_ps: int, path, dim: int = 64) -> None:
  """catalog_size_ps.png of {(side, |I|): measurements}: step time and every process's memory."""
  title = f"Two-tower step ({VARIANT}): {num_ps} parameter servers vs one process"
  panels = (("median step (schedule + join)", "ms"), ("memory per process", "GiB"))
  with points.log_log_figure(path, title, panels) as (ax_t, ax_m):
    for side, label in (("one", "one process"), ("ps", f"{num_ps} ps + 1 worker")):
      pts = [v for v in sizes if "times" in results.get((side, v), {})]
      ax_t.plot(pts, [points.median_ms(results[(side, v)]) for v in pts], "o-", label=label)
    one = [v for v in sizes if "peak_rss_kib" in results.get(("one", v), {})]
    peaks = [results[("one", v)]["peak_rss_kib"] / 2**20 for v in one]
    ax_m.plot(one, peaks, "o-", label="one process (peak)")
    ps_sizes = [v for v in sizes if "servers" in results.get(("ps", v), {})]
    ps = [results[("ps", v)] for v in ps_sizes]
    ax_m.plot(ps_sizes, [m["chief_peak_kib"] / 2**20 for m in ps], "s-", label="chief (peak)")
    curves = {"worker 0": ("^-", "worker")}
    curves.update({f"ps {i}": ("v-", f"ps {i} (after the steps)") for i in range(num_ps)})
    for name, (marker, label) in curves.items():
      ax_m.plot(ps_sizes, [m["servers"][name]["rss_kib"] / 2**20 for m in ps], marker, label=label)
    table = [(v + 1) * dim * 4 / 2**30 for v in sizes]
    ax_m.plot(sizes, table, "k:", label=f"item table (d {dim})")


class ParameterServer:
  """The ``--parameter_server`` run (the interface: `bench.catalog_size.OneProcess`): sides "one"
  and "ps" alternating in every pass, the ps side on a fresh cluster per point."""

  def __init__(self, args, sizes):
    self.args, self.sizes = args, sizes
    self.intro = (
      f"parameter-server side: {VARIANT}, {args.ps_shards} ps + 1 worker processes; "
      f"{args.passes} passes x ({args.warmup} warm-up + {args.steps} timed steps)"
    )

  def sides(self, sweep: int):
    return ("one", "ps") if sweep % 2 == 0 else ("ps", "one")  # interleaved

  def measure(self, side: str, v: int) -> dict:
    spec = dict(vars(self.args), variant=VARIANT, num_items=v)  # the point, the flags' settings
    if side == "one":
      return points.run_point(spec, self.args.timeout)
    cluster, procs = start_cluster(self.args.ps_shards)
    try:
      spec.update(cluster=cluster, server_pids={f"{t} {i}": p.pid for (t, i), p in procs.items()})
      return points.run_point(spec, self.args.timeout, ps_point)
    finally:
      stop_cluster(procs)

  def line(self, side: str, v: int, result: dict) -> str:
    done = f"median {points.median_ms(result):.1f} ms" if result.get("times") else None
    return f"{side} |I|={v}: " + (done or result.get("error", "?"))

  def write(self, results: dict, out, command: str, minutes: float) -> str:
    args = self.args
    lines, projection, summary = report(results, self.sizes, args.ps_shards, args.dim)
    plot(results, self.sizes, args.ps_shards, out / "catalog_size_ps.png", args.dim)
    md = [
      "# Two-tower step against the catalog size: parameter servers vs one process",
      "",
      *points.fenced(command),
      f"Machine: a loaded 2-core CPU (shared with other jobs, training runs among them; "
      f"{minutes:.0f} min): absolute times are noisy, read the ratios "
      "(both sides alternate within each pass).",
      f"Point: two-tower, B = {args.batch_size}, d = {args.dim}, {args.num_users} users (id "
      f"tower), mixed negatives ({args.num_negatives}), corrected logQ, hash-array estimator "
      f"({args.buckets} buckets), LazyAdam; {args.passes} passes of {args.warmup} warm-up + "
      f"{args.steps} timed steps per side and size. Parameter-server side: {args.ps_shards} ps "
      "processes + 1 worker process on 127.0.0.1, the chief schedules one step and joins it "
      "(latency of a step). Peak RSS = VmHWM over the process's life (the tables' "
      'initialisation included); "ps RSS after steps" = VmRSS at the end. Bytes per step: '
      "measured = TCP bytes sent + received by the ps processes during the timed steps / "
      "steps (kernel socket counters, gRPC framing included); computed = the step's rows "
      "gathered + sparse gradients (values and indices) + dense variables and gradients, "
      "without the optimizer slots and estimator cells. Definitions: "
      "bench/catalog/parameter_server.py.",
      "",
      *lines,
      "",
      *projection,
      "",
      summary,
      "",
      "![catalog_size_ps.png](catalog_size_ps.png)",
      "",
    ]
    (out / "catalog_size_ps.md").write_text("\n".join(md))
    (out / "catalog_size_ps.json").write_text(
      json.dumps({f"{side} {v}": m for (side, v), m in results.items()}, default=float)
    )
    print("\n".join(lines + [""] + projection))
    print(f"wrote {out / 'catalog_size_ps.md'}")
    return summary
