"""Independent, reproducible random streams per (run seed, member, purpose).

Each member draws its initialisation and its data order from its own generator, so a member's
trajectory does not depend on how many other members are trained beside it.
"""
from __future__ import annotations

import numpy as np
import torch

STREAMS = {"init": 0, "data_order": 1, "method": 2}  # method: a method's own draws (e.g. anchors)


def member_generator(seed: int, member: int, stream: str, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of stream ``stream`` of member ``member`` of the run with seed ``seed``, on
    ``device``. The same seed gives the same draws on every CPU; a CUDA generator draws its own
    (reproducible) numbers."""
    state = np.random.SeedSequence([seed, member, STREAMS[stream]]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator(device=device).manual_seed(int(state) & 0x7FFF_FFFF_FFFF_FFFF)
