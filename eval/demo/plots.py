"""The demo's PNGs (calibration.png, recall_by_decile.png, learning_curve.png) from the summary dict
of `eval.demo.run`."""

import pathlib

import numpy as np

from eval.demo.stats import mean_and_se

__all__ = ["write_plots"]


def _errorbar_lines(ax, x, stats, key):
  for stat in stats:
    mean = np.asarray(stat[key]["mean"], np.float64)
    se = np.nan_to_num(np.asarray(stat[key]["se"], np.float64))
    style = "--" if stat["label"] in ("oracle", "most popular") else "-"
    ax.errorbar(x, mean, yerr=se, marker="o", ms=3, capsize=2, linestyle=style, label=stat["label"])


def write_plots(summary, out: pathlib.Path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  k = summary["k"]
  stats = list(summary["rows"].values())
  deciles = np.arange(1, len(stats[0]["hit_rate_by_bin"]["mean"]) + 1)
  decile_label = "popularity decile of the item (1 = most popular)"

  fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
  _errorbar_lines(axes[0], deciles, stats, "calibration_by_bin")
  axes[0].set_xticks(deciles)
  axes[0].set_xlabel(decile_label)
  labels = summary["world"]["rank_bins"]
  _errorbar_lines(axes[1], np.arange(len(labels)), stats, "calibration_by_rank")
  axes[1].set_xticks(np.arange(len(labels)))
  axes[1].set_xticklabels(labels, fontsize=8)
  axes[1].set_xlabel("popularity rank of the item")
  axes[0].set_ylabel("E[log P̂(d|u) − log P(d|u)] over held-out draws")
  for ax in axes:
    ax.axhline(0.0, color="black", lw=0.8)
    ax.grid(alpha=0.3)
  axes[1].legend(fontsize=8)
  fig.suptitle(
    "Calibration: learned − true log-probability (0 = the truth; < 0: under-predicted)", fontsize=10
  )
  fig.tight_layout()
  fig.savefig(out / "calibration.png", dpi=110)
  plt.close(fig)

  fig, ax = plt.subplots(figsize=(7.5, 4.8))
  _errorbar_lines(ax, deciles, stats + list(summary["references"].values()), "hit_rate_by_bin")
  ax.set_xticks(deciles)
  ax.set_xlabel(decile_label)
  ax.set_ylabel(f"HR@{k}: share of the decile's held-out draws retrieved")
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(out / "recall_by_decile.png", dpi=110)
  plt.close(fig)

  curve = summary["learning_curve"]
  if curve["steps"]:
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8))
    for name, per_seed in curve["kl"].items():
      mean, se = mean_and_se(per_seed)
      axes[0].errorbar(
        curve["steps"],
        mean,
        yerr=np.nan_to_num(se),
        marker="o",
        ms=3,
        capsize=2,
        label=summary["rows"][name]["label"],
      )
    axes[0].set_yscale("log")
    axes[0].set_ylabel("KL(P ‖ P̂) on held-out users")
    for d in summary["paired_differences"]:
      if "kl_curve" in d and not d["b"].endswith(":none"):  # none is off this scale
        axes[1].errorbar(
          curve["steps"],
          d["kl_curve"]["mean"],
          yerr=np.nan_to_num(np.asarray(d["kl_curve"]["ci95"], np.float64)),
          marker="o",
          ms=3,
          capsize=2,
          label=d["label"],
        )
    axes[1].axhline(0.0, color="black", lw=0.8)
    axes[1].set_ylabel("paired KL difference (95% interval); < 0: first is closer")
    for ax in axes:
      ax.set_xlabel("training step")
      ax.grid(alpha=0.3, which="both")
      ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "learning_curve.png", dpi=110)
    plt.close(fig)
