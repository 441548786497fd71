"""The plots' file names, apart from plots.py so the text renderers can place them in the
report without importing matplotlib."""

from __future__ import annotations

CDF_PLOT = "latency_cdfs.png"
CLASS_PLOT = "per_class.png"
ACCEPTANCE_PLOT = "acceptance_per_position.png"
TIMESERIES_PLOT = "latency_over_time.png"
# What a reader looks at right under the verdict: E2E and per-token latency of each prompt
# class over the run, then the classes side by side. The others follow the tables.
KEY_PLOTS = (TIMESERIES_PLOT, CLASS_PLOT)
