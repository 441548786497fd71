"""PNG plots of a sweep: speedup vs k (predicted curve, measured points with their CIs),
acceptance per position, and SD speedup by concurrency (break-even)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only, no display
import matplotlib.pyplot as plt

from tune.results import MeasuredSpeedup, TuneResult

SPEEDUP_PLOT = "speedup_vs_k.png"
ACCEPTANCE_PLOT = "acceptance_per_position.png"
BREAK_EVEN_PLOT = "break_even.png"


def _error_bars(points: list[MeasuredSpeedup]) -> list[list[float]]:
    """Distances below and above each point to its interval (0 where it has none; the
    bootstrap's float32 sums can put a degenerate bound a rounding error past the point)."""
    below, above = [], []
    for p in points:
        low, high = p.e2e_speedup.low, p.e2e_speedup.high
        below.append(max(p.point - low, 0.0) if low is not None else 0.0)
        above.append(max(high - p.point, 0.0) if high is not None else 0.0)
    return [below, above]


def _classes(result: TuneResult) -> list[str]:
    return sorted({m.prompt_class for m in result.models})


def plot_speedup_vs_k(result: TuneResult, path: Path) -> bool:
    classes = _classes(result)
    if not classes:
        return False
    fig, axes = plt.subplots(1, len(classes), figsize=(5.5 * len(classes), 4), squeeze=False)
    for ax, name in zip(axes[0], classes, strict=True):
        for index, model in enumerate(m for m in result.models if m.prompt_class == name):
            color = f"C{index}"
            measured_ks = [p.k for p in model.predictions if not p.extrapolated]
            ax.plot(
                measured_ks,
                [model.prediction(k).e2e_speedup for k in measured_ks],
                "-",
                color=color,
                label=f"{model.draft} predicted",
            )
            extra = [p for p in model.predictions if p.extrapolated]
            if extra:
                ks = [measured_ks[-1], *(p.k for p in extra)]
                ax.plot(
                    ks,
                    [model.prediction(k).e2e_speedup for k in ks],
                    ":",
                    color=color,
                    label=f"{model.draft} extrapolated",
                )
            for role, marker in (("fit", "o"), ("holdout", "s")):
                points = [m for m in model.measured if m.role == role]
                if not points:
                    continue
                ax.errorbar(
                    [p.k for p in points],
                    [p.point for p in points],
                    yerr=_error_bars(points),
                    fmt=marker,
                    color=color,
                    mfc=color if role == "fit" else "white",
                    capsize=3,
                    label=f"{model.draft} measured ({role})",
                )
        ax.axhline(1.0, color="grey", lw=0.8)
        ax.set_title(f"{name}: E2E speedup vs k")
        ax.set_xlabel("k (draft tokens per step)")
        ax.set_ylabel("baseline E2E / SD E2E")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_acceptance(result: TuneResult, path: Path) -> bool:
    classes = _classes(result)
    if not classes:
        return False
    fig, axes = plt.subplots(1, len(classes), figsize=(5.5 * len(classes), 3.6), squeeze=False)
    for ax, name in zip(axes[0], classes, strict=True):
        for index, model in enumerate(m for m in result.models if m.prompt_class == name):
            rates = model.acceptance.per_position_rate
            ax.plot(
                range(1, len(rates) + 1),
                rates,
                "o-",
                color=f"C{index}",
                label=f"{model.draft} (k={model.acceptance_from_k}, {model.acceptance.source})",
            )
        ax.set_ylim(0, 1.02)
        ax.set_title(f"{name}: P(position i accepted)")
        ax.set_xlabel("draft position i")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def plot_break_even(result: TuneResult, path: Path) -> bool:
    if not result.break_even:
        return False
    fig, ax = plt.subplots(figsize=(6, 4))
    for index, block in enumerate(result.break_even):
        levels = [c for c, _ in block.points]
        points = [p for _, p in block.points]
        ax.errorbar(
            levels,
            [p.point for p in points],
            yerr=_error_bars(points),
            fmt="o-",
            color=f"C{index}",
            capsize=3,
            label=block.prompt_class,
        )
    ax.axhline(1.0, color="grey", lw=0.8)
    ax.set_title(f"{result.break_even[0].setting.label}: speedup by concurrency")
    ax.set_xlabel("concurrent requests")
    ax.set_ylabel("baseline E2E / SD E2E")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
