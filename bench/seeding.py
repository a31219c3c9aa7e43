"""Independent, reproducible random streams per (run seed, member, purpose).

Each member draws its initialisation and its data order from its own generator, so a member's
trajectory does not depend on how many other members are trained beside it.
"""
from __future__ import annotations

import numpy as np
import torch

STREAMS = {"init": 0, "data_order": 1, "method": 2, "dropout": 3}  # method: a method's own draws (e.g. anchors)
# splitmix64's constants as signed int64 (torch has no uint64 arithmetic; int64 products wrap alike)
GAMMA, MIX1, MIX2 = -7046029254386353131, -4658895280553007687, -7723592293110705685


def member_seed(seed: int, member: int, stream: str) -> int:
    """The 63-bit seed of stream ``stream`` of member ``member`` of the run with seed ``seed``."""
    state = np.random.SeedSequence([seed, member, STREAMS[stream]]).generate_state(1, dtype=np.uint64)[0]
    return int(state) & 0x7FFF_FFFF_FFFF_FFFF


def member_generator(seed: int, member: int, stream: str, device: torch.device | str = "cpu") -> torch.Generator:
    """The generator of stream ``stream`` of member ``member`` of the run with seed ``seed``, on
    ``device``. The same seed gives the same draws on every CPU; a CUDA generator draws its own
    (reproducible) numbers."""
    return torch.Generator(device=device).manual_seed(member_seed(seed, member, stream))


def _mix(z: torch.Tensor) -> torch.Tensor:
    """splitmix64's finaliser on int64 tensors (products wrap; shifts made logical by masking)."""
    z = (z ^ ((z >> 30) & 0x3_FFFF_FFFF)) * MIX1
    z = (z ^ ((z >> 27) & 0x1F_FFFF_FFFF)) * MIX2
    return z ^ ((z >> 31) & 0x1_FFFF_FFFF)


def counter_uniform(seeds: torch.Tensor, counter: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """Uniform float32 numbers in [0, 1), (M, *shape): row m a function of (seeds[m], counter, the
    element's position) alone, by a counter-based hash (splitmix64). No generator state: the same
    numbers on every device, whatever else is computed beside them, and a CUDA graph can replay it
    (``counter`` is a tensor the caller advances in place)."""
    key = _mix(seeds.view(-1, *[1] * len(shape)) ^ _mix(counter))
    position = torch.arange(1, 1 + int(np.prod(shape)), device=seeds.device, dtype=torch.long).view(shape)
    bits = (_mix(key + position * GAMMA) >> 40) & 0xFF_FFFF  # the top 24 bits: exact in float32
    return bits.float() * 2.0 ** -24


class CounterStream:
    """A method's per-step random draws on the device: ``counter_uniform`` of one seed per row and a
    step counter that ``advance`` moves on in place (so a CUDA graph replays it, and a row's draws do
    not depend on the rows beside it: runs pack). Several draws of one step are told apart by
    ``slot`` (fewer than SLOTS). Streams made with one ``step`` tensor advance together."""
    SLOTS = 64

    def __init__(self, seeds: torch.Tensor, step: torch.Tensor | None = None):
        self.seeds = seeds  # (rows,) int64
        self.step = torch.zeros((), dtype=torch.long, device=seeds.device) if step is None else step

    @classmethod
    def cat(cls, streams: list["CounterStream"]) -> "CounterStream":
        """The rows of several streams (a pack's runs) as one, from step 0."""
        return cls(torch.cat([s.seeds for s in streams]))

    def uniform(self, shape: tuple[int, ...], slot: int | None = None) -> torch.Tensor:
        """(rows, *shape) uniforms in [0, 1) of this step (and ``slot``)."""
        counter = self.step if slot is None else self.step * self.SLOTS + slot
        return counter_uniform(self.seeds, counter, shape)

    def advance(self) -> None:
        self.step.add_(1)
