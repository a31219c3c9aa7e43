"""What every figure shares: the file-only matplotlib backend, the score labels, the colour palette
and the title of a protocol's runs."""
from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")  # files only; never needs a display
import pandas as pd  # noqa: E402
import seaborn as sns  # noqa: E402


SCORE_LABELS = {"pred_entropy": "predictive entropy (bits)", "mutual_info": "mutual information (bits)",
                "one_minus_max_prob": "1 - max probability", "eq35_distance": "Eq. 35 distance",
                "member_entropy": "one member's entropy (bits)",
                "geo_mean_entropy": "entropy of the geometric mean (bits)"}


def score_label(score: str) -> str:
    return SCORE_LABELS.get(score, score)


def primary_of(runs: pd.DataFrame, variant: str) -> str:
    return str(runs.loc[runs["variant"] == variant, "primary_score"].iloc[0])


def palette(variants: list[str]) -> dict[str, tuple]:
    return dict(zip(variants, sns.color_palette("colorblind", len(variants))))


def slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "_", text).strip("_")


def protocol_title(runs) -> str:
    presets = ", ".join(dict.fromkeys(map(str, runs["preset"])))
    return f"preset {presets}: {runs['id_dataset'].iloc[0]} in distribution"
