"""Seaborn figures of a report (PNG): arrival patterns (the paper's Fig. 7), data volume, operator
instances and leased VMs over time per configuration (Figs. 8-11), compliance and cost against the
paper with sd error bars, and per-operator duration distributions.

Each function takes the small tables of reporting.figure_data / paper_comparison and writes one
PNG; nothing here reads event logs.
"""
from __future__ import annotations

from pathlib import Path
from typing import Dict, List, Sequence

import matplotlib

matplotlib.use("Agg")  # headless and deterministic; must precede pyplot
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

from reporting.metrics import (
    LEVEL_LABELS,  # noqa: E402
    LEVELS,  # noqa: E402
)

SOURCES = ("paper", "measured")
_SERIES = ("data volume [items/s]", "operator instances", "leased VMs")
_COST_METRICS = (("resource_cost", "resource cost"),
                 *((f"{lv}_total_cost", f"total cost {LEVEL_LABELS[lv]}") for lv, _ in LEVELS))


def _present(order: Sequence[str], configs: Sequence[str]) -> List[str]:
    """The configurations of `configs` in the report's order (unknown ones last, by name)."""
    present = set(configs)
    return [c for c in order if c in present] + sorted(present - set(order))


def _palette(configs: Sequence[str]) -> Dict[str, tuple]:
    colours = sns.color_palette("deep", max(len(configs), 1))
    return {c: colours[i] for i, c in enumerate(configs)}


def _save(fig, path: Path, dpi: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=dpi, metadata={"Software": None})  # no version stamp: same data, same bytes
    plt.close(fig)
    return path


def arrival_patterns(arrivals: pd.DataFrame, path: Path, dpi: int = 100) -> Path:
    patterns = sorted(arrivals["pattern"].unique())
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(1, len(patterns), figsize=(3.2 * len(patterns), 2.6), sharey=True, squeeze=False)
        for ax, pattern in zip(axes[0], patterns, strict=False):
            own = arrivals[arrivals["pattern"] == pattern]
            sns.lineplot(data=own, x="minute", y="machines", drawstyle="steps-post", ax=ax, errorbar=None)
            ax.set_title(pattern)
            ax.set_xlabel("time [min]")
            ax.set_ylim(0, int(arrivals["machines"].max()) + 1)
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
        axes[0][0].set_ylabel("active machines")
        fig.suptitle("Arrival patterns (measured load)")
        return _save(fig, path, dpi)


def timeseries(data: pd.DataFrame, pattern: str, order: Sequence[str], path: Path, dpi: int = 100) -> Path:
    """Rows: data volume, operator instances, leased VMs; one line per configuration (mean over
    repetitions, band = sd), configurations in `order`."""
    own = data[data["pattern"] == pattern]
    configs = _present(order, own["config"])
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(len(_SERIES), 1, figsize=(9, 7), sharex=True)
        for ax, series in zip(axes, _SERIES, strict=False):
            rows = own[own["series"] == series]
            sns.lineplot(data=rows, x="minute", y="value", hue="config", hue_order=configs,
                         palette=_palette(configs), errorbar="sd", err_kws={"step": "post"},
                         drawstyle="steps-post", ax=ax, linewidth=1.2)
            ax.set_ylabel(series)
            ax.set_xlabel("time [min]")
            if ax is not axes[0] and ax.get_legend():
                ax.get_legend().remove()
        axes[0].legend(title="configuration", loc="upper left", ncols=len(configs), fontsize="small")
        fig.suptitle(f"{pattern}: data volume, operator instances and leased VMs over time")
        return _save(fig, path, dpi)


def _bars(ax, table: pd.DataFrame, order: Sequence[str]) -> None:
    """Grouped bars: x = configuration, one bar per source (paper, measured), error bars = sd."""
    width = 0.38
    colours = dict(zip(SOURCES, sns.color_palette("deep", 2), strict=False))
    x = np.arange(len(order))
    for i, source in enumerate(SOURCES):
        rows = table[table["source"] == source].set_index("label").reindex(order)
        offset = (i - 0.5) * width
        ax.bar(x + offset, rows["mean"].to_numpy(float), width, label=source, color=colours[source])
        ax.errorbar(x + offset, rows["mean"].to_numpy(float), yerr=rows["sd"].fillna(0.0).to_numpy(float),
                    fmt="none", ecolor="black", elinewidth=1, capsize=3)
    ax.set_xticks(x, order, rotation=30, ha="right")


def _paper_vs_measured(comparison: pd.DataFrame, metrics: Sequence[tuple], title: str, ylabel: str,
                       path: Path, dpi: int) -> Path:
    patterns = sorted(comparison["pattern"].unique())
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(len(patterns), len(metrics), figsize=(3.6 * len(metrics), 2.9 * len(patterns)),
                                 squeeze=False)
        for r, pattern in enumerate(patterns):
            for c, (metric, label) in enumerate(metrics):
                ax = axes[r][c]
                rows = comparison[(comparison["pattern"] == pattern) & (comparison["metric"] == metric)]
                tidy = pd.concat([
                    pd.DataFrame({"label": rows["config"], "source": s, "mean": rows[f"mean_{s}"],
                                  "sd": rows[f"sd_{s}"]})
                    for s in SOURCES])
                _bars(ax, tidy, list(dict.fromkeys(rows["config"])))
                ax.set_title(f"{pattern}: {label}", fontsize="medium")
                ax.set_ylabel(ylabel if c == 0 else "")
        handles, labels = axes[0][0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="upper right", ncols=2, fontsize="small")
        fig.suptitle(title)
        return _save(fig, path, dpi)


def compliance_vs_paper(comparison: pd.DataFrame, path: Path, dpi: int = 100) -> Path:
    metrics = [(f"{lv}_compliance_pct", f"{LEVEL_LABELS[lv]} compliance") for lv, _ in LEVELS]
    return _paper_vs_measured(comparison, metrics, "Compliance (without O2/O6): paper vs measured, mean ± sd",
                              "compliance [%]", path, dpi)


def cost_vs_paper(comparison: pd.DataFrame, path: Path, dpi: int = 100) -> Path:
    return _paper_vs_measured(comparison, _COST_METRICS, "Cost: paper vs measured, mean ± sd", "cost", path, dpi)


def durations(hist: pd.DataFrame, pattern: str, order: Sequence[str], path: Path, dpi: int = 100) -> Path:
    """Per operator: the share of sampled items at most x times their SLO (ECDF of duration / SLO,
    pooled over repetitions), one line per configuration (in `order`); dotted lines at 1x, 2x and 5x SLO."""
    own = hist[hist["pattern"] == pattern].copy()
    own["share"] = own.groupby(["config", "operator"])["count"].cumsum() / own.groupby(
        ["config", "operator"])["count"].transform("sum")
    operators = sorted(own["operator"].unique())
    configs = _present(order, own["config"])
    cols = 3
    rows_n = max(1, int(np.ceil(len(operators) / cols)))
    with sns.axes_style("whitegrid"):
        fig, axes = plt.subplots(rows_n, cols, figsize=(3.4 * cols, 2.6 * rows_n), sharex=True, sharey=True,
                                 squeeze=False)
        for ax, operator in zip(axes.flat, operators, strict=False):
            sns.lineplot(data=own[own["operator"] == operator], x="ratio", y="share", hue="config", hue_order=configs,
                         palette=_palette(configs), drawstyle="steps-post", errorbar=None, ax=ax, linewidth=1.2)
            for _, factor in LEVELS:
                ax.axvline(factor, color="grey", linestyle=":", linewidth=1)
            ax.set_xscale("log")
            ax.set_title(operator)
            ax.set_xlabel("duration / SLO")
            ax.set_ylabel("share of items")
            if ax.get_legend() and operator != operators[0]:
                ax.get_legend().remove()
        for ax in list(axes.flat)[len(operators):]:
            ax.set_visible(False)
        fig.suptitle(f"{pattern}: per-operator duration distribution (dotted: 1×, 2×, 5× SLO)")
        return _save(fig, path, dpi)
