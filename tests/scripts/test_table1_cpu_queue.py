"""scripts/table1_cpu_queue.sh in a scratch repository, with a stand-in for python that writes
what the real runs write: each run starts in a worktree pinned at the queue's commit, its
results are copied under docs/results/table1/ and committed alone (other changes stay out of the
commit), a rerun skips what is committed, DRY_RUN runs nothing; without its arguments it prints
its usage."""

import os
import pathlib
import subprocess

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "table1_cpu_queue.sh"

# Stands for python: records where it ran, then writes the files of the run it was asked for.
FAKE_PYTHON = r"""#!/usr/bin/env bash
echo "$(pwd) $PYTHONPATH $*" >> "$FAKE_LOG"
arg() { for a in "$@"; do case "$a" in --$KEY=*) echo "${a#--$KEY=}";; esac; done; }
if [ "$2" = bench.reproduce ]; then
  run=$(KEY=out arg "$@")/full/ml1m_loo/$(KEY=rows arg "$@")/seed$(KEY=seeds arg "$@")
  mkdir -p "$run/model" "$run/eval"
  for f in train_metrics.json timing.json model/history.json eval/eval_results.json; do
    echo '{"run": "'"$run"'"}' > "$run/$f"
  done
else
  m=$(KEY=metrics_json arg "$@")
  mkdir -p "$(dirname "$m")" && echo '{"logq": "'"$(KEY=logq arg "$@")"'"}' > "$m"
fi
"""


def _git(repo, *args):
  return subprocess.run(
    ["git", "-C", str(repo), *args], check=True, capture_output=True, text=True
  ).stdout.strip()


def _scratch(tmp_path):
  repo = tmp_path / "repo"
  (repo / "docs" / "results" / "table1").mkdir(parents=True)
  (repo / "docs" / "results" / "table1" / "README.md").write_text("table 1\n")
  _git(repo.parent, "init", "-q", str(repo))
  _git(repo, "add", ".")
  _git(repo, "commit", "-q", "-m", "start")
  fake = tmp_path / "python"
  fake.write_text(FAKE_PYTHON)
  fake.chmod(0o755)
  (tmp_path / "data" / "ml1m").mkdir(parents=True)
  return repo, fake


def _run(repo, *args, **env):
  full = {
    **os.environ,
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@t",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@t",
    **env,
  }
  return subprocess.run(
    ["bash", str(SCRIPT), *args], cwd=repo, capture_output=True, text=True, env=full, timeout=60
  )


def test_patience_runs_are_committed_one_by_one_from_the_pinned_worktree(tmp_path):
  repo, fake = _scratch(tmp_path)
  head = _git(repo, "rev-parse", "HEAD")
  (repo / "docs" / "results" / "table1" / "README.md").write_text("edited, not committed\n")
  work, log = tmp_path / "work", tmp_path / "calls.log"
  env = dict(
    PYTHON=str(fake), FAKE_LOG=str(log), OURS_COMMIT=head,
    PATIENCE_RUNS="mixed_none:2 mixed_corrected:0",
  )  # fmt: skip
  proc = _run(repo, "patience", str(work), str(tmp_path / "data"), **env)
  assert proc.returncode == 0, proc.stderr
  calls = log.read_text().splitlines()
  src = str(work / f"src_{head}")
  assert len(calls) == 2 and all(c.startswith(f"{src} {src} -m bench.reproduce") for c in calls)
  assert all("--patience=200 --test_curve" in c and "--uniform_negatives=query" in c for c in calls)
  assert (
    "--rows=mixed_none --seeds=2" in calls[0] and "--rows=mixed_corrected --seeds=0" in calls[1]
  )
  subjects = _git(repo, "log", "--format=%s").splitlines()
  assert subjects[2] == "start" and "mixed_corrected seed 0" in subjects[0]
  assert "mixed_none seed 2" in subjects[1] and f"code {head}" in subjects[1]
  dest = "docs/results/table1/patience_factor/runs/p200_query/ml1m_loo/mixed_none/seed2"
  files = _git(repo, "show", "--name-only", "--format=", "HEAD~1").splitlines()
  assert sorted(files) == [
    f"{dest}/{f}"
    for f in ("eval/eval_results.json", "model/history.json", "timing.json", "train_metrics.json")
  ]
  assert _git(repo, "status", "--porcelain") == "M docs/results/table1/README.md"
  again = _run(repo, "patience", str(work), str(tmp_path / "data"), **env)
  assert again.returncode == 0 and again.stdout.count("committed before, skipped") == 2
  assert len(log.read_text().splitlines()) == 2


def test_paper_runs_land_as_metrics_and_dry_run_runs_nothing(tmp_path):
  repo, fake = _scratch(tmp_path)
  head = _git(repo, "rev-parse", "HEAD")
  work, log = tmp_path / "work", tmp_path / "calls.log"
  env = dict(PYTHON=str(fake), FAKE_LOG=str(log), PAPER_COMMIT=head, PAPER_RUNS="standard:1")
  dry = _run(repo, "paper", str(work), str(tmp_path / "data"), DRY_RUN="1", **env)
  assert dry.returncode == 0 and "to run: " in dry.stdout and "--logq=standard" in dry.stdout
  assert not log.exists() and not (work / f"src_{head}").exists()
  proc = _run(repo, "paper", str(work), str(tmp_path / "data"), **env)
  assert proc.returncode == 0, proc.stderr
  landed = repo / "docs/results/table1/paper_code/cpu_patience20/standard/seed1/metrics.json"
  assert landed.read_text().strip() == '{"logq": "standard"}'
  assert "paper-code run: ml1m standard seed 1" in _git(repo, "log", "-1", "--format=%s")
  assert "--patience=20 --seed=1" in log.read_text()


def test_usage():
  proc = subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True)
  assert proc.returncode == 2 and "usage: scripts/table1_cpu_queue.sh" in proc.stderr
