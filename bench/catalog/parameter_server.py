r"""The parameter-server side of bench/catalog_size.py (``--parameter_server``).

    python bench/catalog_size.py --parameter_server --sizes=10000,100000,1000000 \
        --out=docs/results/catalog_size_ps

The same two-tower point as the one-process side (mixed negatives, hash-array estimator,
LazyAdam: ``mixed+hash_array@lazy_adam``, built by `bench.catalog.points.build_point`, i.e. the
training binary's code) on a local multi-process cluster: ``--ps_shards`` ps processes and one
worker process (`train.distribute.run_server`, started fresh for each point), the chief being the
point's own (forked) process with `train.distribute.parameter_server_strategy` (tables
partitioned over the ps, `MinSizePartitioner`) and a `ClusterCoordinator`. A step = one
``coordinator.schedule`` of the training step (objective, gradients, LazyAdam update, estimator
update, all on the worker against variables on the ps) then ``join``: its latency. The points of
both sides alternate in each pass (same moments of the shared machine).

Measured per point:
* min / median ms per step (timed steps pooled over the passes);
* peak resident set (VmHWM, the whole life of the process: the tables' initialisation included)
  and the resident set after the timed steps (VmRSS), of each ps, the worker and the chief;
* bytes moved per step, two ways:
  - ``measured``: bytes the ps processes sent and received over TCP during the timed steps
    (the kernel's per-socket counters ``bytes_sent`` / ``bytes_received`` of every socket of
    each ps process, read with ``ss -tinp`` before and after), divided by the number of steps:
    everything the ps exchanged, gRPC and protobuf framing included;
  - ``computed``: from the tensors of the step itself (returned by it): for each variable
    (shard), rows gathered by the forward pass + its sparse gradient (values and int64 indices)
    for an `IndexedSlices` gradient, or the whole variable read + a dense gradient. It leaves
    out the optimizer's slot rows (LazyAdam reads and writes m, v and the per-row counts of the
    updated rows) and the estimator's cells, which ``measured`` includes.
* a 1e8 projection (``project_memory``): each ps's resident set grows linearly in |I| (the item
  table and its LazyAdam slots, split over the shards); fitted on the two largest sizes measured,
  labelled as a projection.
"""

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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

__all__ = [
  "start_cluster",
  "stop_cluster",
  "socket_bytes",
  "process_kib",
  "ps_point",
  "project_memory",
]


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


def process_kib(pid: int, field: str) -> int:
  """A kB field of /proc/PID/status (VmRSS, VmHWM); 0 if absent."""
  try:
    with open(f"/proc/{pid}/status") as f:
      m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
  except OSError:
    return 0
  return int(m.group(1)) if m else 0


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

  from bench.catalog import points
  from bench.common import memory
  from train import distribute

  tf.get_logger().setLevel("ERROR")
  strategy = distribute.parameter_server_strategy()
  coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
  with strategy.scope():
    built = points.build_point(spec)
  objective, variables, optimizer = built.objective, built.variables, built.optimizer
  step = built.step
  shards = len(getattr(built.table, "variables", [built.table]))

  def moved(var, g):
    row = int(np.prod(var.shape[1:])) * var.dtype.size
    if isinstance(g, tf.IndexedSlices):  # rows gathered + the sparse gradient (and indices)
      rows = tf.size(g.indices, out_type=tf.int64)
      return rows * (2 * row + 8)
    return tf.constant(2 * int(np.prod(var.shape)) * var.dtype.size, tf.int64)

  def replica(batch):
    with tf.GradientTape() as tape:
      terms = objective(batch, step, training=True)
    grads = tape.gradient(terms["loss"], variables)
    payload = tf.add_n([moved(v, g) for g, v in zip(grads, variables) if g is not None])
    optimizer.apply_gradients([(g, v) for g, v in zip(grads, variables) if g is not None])
    step.assign_add(1)
    return terms["loss"], payload

  @tf.function
  def train_step(batch):
    return strategy.run(replica, args=(batch,))

  def run(i):
    remote = coordinator.schedule(train_step, args=(built.batches[i % 4],))
    coordinator.join()
    return remote.fetch()

  for i in range(spec["warmup"]):
    run(i)
  pids = {name: pid for name, pid in spec["server_pids"].items()}
  ps_pids = [pid for name, pid in pids.items() if name.startswith("ps")]
  before = socket_bytes(ps_pids)
  times, value, payload = [], float("nan"), 0
  for i in range(spec["steps"]):
    start = time.perf_counter()
    value, payload = (float(t) for t in run(i))
    times.append(time.perf_counter() - start)
  after = socket_bytes(ps_pids)
  measured = sum(after[p][0] - before[p][0] + after[p][1] - before[p][1] for p in ps_pids)
  return dict(
    times=times,
    loss=value,
    shards=shards,
    computed_bytes=int(payload),
    measured_bytes=measured / len(times),
    measured_received=sum(after[p][0] - before[p][0] for p in ps_pids) / len(times),
    chief_peak_kib=memory.status_kib("VmHWM"),
    chief_rss_kib=memory.status_kib("VmRSS"),
    servers={
      name: dict(peak_kib=process_kib(pid, "VmHWM"), rss_kib=process_kib(pid, "VmRSS"))
      for name, pid in pids.items()
    },
    table_bytes=int(np.prod(built.table.shape)) * 4,
    estimator_bytes=points.estimator_bytes(built.estimator),
  )


def project_memory(points, target: float = 1e8):
  """Linear projection of a ps's resident set (KiB) to ``target`` items from [(|I|, KiB)]: the
  line through the two largest sizes (the per-item cost is the table's rows and slots)."""
  (n1, m1), (n2, m2) = sorted(points)[-2:]
  slope = (m2 - m1) / (n2 - n1)
  return m2 + slope * (target - n2), slope


VARIANT = "mixed+hash_array@lazy_adam"


def _kib_gib(kib) -> str:
  return "" if not kib else f"{kib / 2**20:.2f}"


def _bytes(n) -> str:
  return f"{n / 2**10:.0f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


def report(results: dict, sizes, num_ps: int, dim: int = 64) -> tuple:
  """(markdown table lines, projection lines, summary) of {(side, |I|): measurements}."""
  from bench.catalog.points import fmt_size
  from bench.common.report import markdown_header, markdown_row, summary_line
  from bench.common.timing import min_median

  ps_names = [f"ps {i}" for i in range(num_ps)]
  lines = markdown_header(
    [
      "\\|I\\|",
      "side",
      "min ms",
      "median ms",
      "median / one-process",
      "peak RSS GiB: chief (or the process)",
      "worker",
      *(f"{n}" for n in ps_names),
      "ps RSS after steps GiB",
      "bytes / step measured (ps TCP)",
      "computed (rows + grads)",
      "item table GiB",
      "loss",
    ]
  )
  parts, per_ps, chief = [], [], []
  for v in sizes:
    one = results.get(("one", v), {})
    base = np.median(one["times"]) if "times" in one else None
    for side in ("one", "ps"):
      m = results.get((side, v), {})
      if "times" not in m:
        lines.append(f"| {fmt_size(v)} | {side} | {m.get('error', 'not run')} |" + "|" * 11)
        continue
      t_min, t_med = min_median(np.array(m["times"]) * 1e3)
      ratio = "" if base is None else f"{np.median(m['times']) / base:.2f}"
      if side == "one":
        lines.append(
          markdown_row(
            [
              fmt_size(v),
              "one process",
              f"{t_min:.1f}",
              f"{t_med:.1f}",
              ratio,
              _kib_gib(m["peak_rss_kib"]),
              "",
              *[""] * num_ps,
              "",
              "",
              "",
              f"{m['table_bytes'] / 2**30:.3f}",
              f"{m['loss']:.3f}",
            ]
          )
        )
        continue
      servers = m["servers"]
      per_ps.append((v, max(servers[n]["rss_kib"] for n in ps_names)))
      chief.append((v, m["chief_peak_kib"]))
      lines.append(
        markdown_row(
          [
            fmt_size(v),
            f"parameter server ({m['shards']} shards)",
            f"{t_min:.1f}",
            f"{t_med:.1f}",
            ratio,
            _kib_gib(m["chief_peak_kib"]),
            _kib_gib(servers["worker 0"]["peak_kib"]),
            *(_kib_gib(servers[n]["peak_kib"]) for n in ps_names),
            " / ".join(_kib_gib(servers[n]["rss_kib"]) for n in ps_names),
            _bytes(m["measured_bytes"]),
            _bytes(m["computed_bytes"]),
            f"{m['table_bytes'] / 2**30:.3f}",
            f"{m['loss']:.3f}",
          ]
        )
      )
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
  """catalog_size_ps.png of {(side, |I|): measurements}: median step (ms) of both sides, and the
  memory of every process (peak RSS of the one process and the chief, worker and ps RSS after the
  steps) with the item table's size, against |I| (log-log)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, (ax_t, ax_m) = plt.subplots(1, 2, figsize=(11, 4.2))
  gib = lambda kib: kib / 2**20
  for side, label in (("one", "one process"), ("ps", f"{num_ps} ps + 1 worker")):
    pts = [v for v in sizes if "times" in results.get((side, v), {})]
    ax_t.plot(pts, [np.median(results[(side, v)]["times"]) * 1e3 for v in pts], "o-", label=label)
  one = [v for v in sizes if "peak_rss_kib" in results.get(("one", v), {})]
  ax_m.plot(
    one, [gib(results[("one", v)]["peak_rss_kib"]) for v in one], "o-", label="one process (peak)"
  )
  ps = [v for v in sizes if "servers" in results.get(("ps", v), {})]
  ax_m.plot(ps, [gib(results[("ps", v)]["chief_peak_kib"]) for v in ps], "s-", label="chief (peak)")
  ax_m.plot(
    ps,
    [gib(results[("ps", v)]["servers"]["worker 0"]["rss_kib"]) for v in ps],
    "^-",
    label="worker",
  )
  for i in range(num_ps):
    ax_m.plot(
      ps,
      [gib(results[("ps", v)]["servers"][f"ps {i}"]["rss_kib"]) for v in ps],
      "v-",
      label=f"ps {i} (after the steps)",
    )
  ax_m.plot(sizes, [(v + 1) * dim * 4 / 2**30 for v in sizes], "k:", label=f"item table (d {dim})")
  from bench.catalog.points import log_log_axes

  log_log_axes(((ax_t, "median step (schedule + join)", "ms"), (ax_m, "memory per process", "GiB")))
  fig.suptitle(
    f"Two-tower step ({VARIANT}): {num_ps} parameter servers vs one process", fontsize=10
  )
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main_ps(args, command: str) -> str:
  """The ``--parameter_server`` run of bench/catalog_size.py (module docstring); returns the
  summary line."""
  import pathlib

  from bench.catalog import points

  sizes = sorted(int(float(s)) for s in args.sizes.split(",") if s)
  results, started = {}, time.time()
  print(
    f"parameter-server side: {VARIANT}, {args.ps_shards} ps + 1 worker processes; "
    f"{args.passes} passes x ({args.warmup} warm-up + {args.steps} timed steps)",
    flush=True,
  )
  for sweep in range(args.passes):
    for v in sizes:
      spec = dict(
        variant=VARIANT,
        num_items=v,
        batch_size=args.batch_size,
        dim=args.dim,
        num_users=args.num_users,
        num_negatives=args.num_negatives,
        buckets=args.buckets,
        steps=args.steps,
        warmup=args.warmup,
        seed=args.seed,
      )
      for side in ("one", "ps") if sweep % 2 == 0 else ("ps", "one"):  # interleaved
        if side == "one":
          result = points.run_point(spec, args.timeout)
        else:
          cluster, procs = start_cluster(args.ps_shards)
          try:
            pids = {f"{t} {i}": p.pid for (t, i), p in procs.items()}
            result = points.run_point(
              dict(spec, cluster=cluster, server_pids=pids), args.timeout, ps_point
            )
          finally:
            stop_cluster(procs)
        key = (side, v)
        results[key] = points.merge(results[key], result) if key in results else result
        if "servers" in result and "servers" in results[key]:  # memory: the larger peaks
          for name, mem in result["servers"].items():
            old = results[key]["servers"][name]
            results[key]["servers"][name] = {k: max(old[k], mem[k]) for k in mem}
        t = result.get("times")
        print(
          f"pass {sweep + 1}: {side} |I|={v}: "
          + (f"median {np.median(t) * 1e3:.1f} ms" if t else result.get("error", "?")),
          flush=True,
        )
  lines, projection, summary = report(results, sizes, args.ps_shards, args.dim)
  out = pathlib.Path(args.out)
  out.mkdir(parents=True, exist_ok=True)
  md = [
    "# Two-tower step against the catalog size: parameter servers vs one process",
    "",
    "```",
    command.strip(),
    "```",
    "",
    f"Machine: a loaded 2-core CPU (shared with other jobs, training runs among them; "
    f"{(time.time() - started) / 60:.0f} min): absolute times are noisy, read the ratios "
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
  ]
  plot(results, sizes, args.ps_shards, out / "catalog_size_ps.png", args.dim)
  md += ["![catalog_size_ps.png](catalog_size_ps.png)", ""]
  (out / "catalog_size_ps.md").write_text("\n".join(md))
  (out / "catalog_size_ps.json").write_text(
    json.dumps({f"{side} {v}": m for (side, v), m in results.items()}, default=float)
  )
  print("\n".join(lines + [""] + projection))
  print(f"wrote {out / 'catalog_size_ps.md'}")
  return summary
