"""Deep ensemble (Lakshminarayanan et al., 2017): independently initialised members, cross-entropy."""
from __future__ import annotations

import dataclasses

from bench.options import option, parse_int
from methods.base import Method

MEMBERS_OPTION = dict(parse=parse_int, check=lambda v: v >= 1, allowed="an integer >= 1",
                      help="number of ensemble members")


@dataclasses.dataclass(frozen=True)
class DeepEnsemble(Method):
    name = "deep_ensemble"
    summary = "independently initialised members trained with cross-entropy"

    members: int = option(3, **MEMBERS_OPTION)
