"""AnchorNet's term as a squared norm (dare-bench 0.6.3, methods/anchor_net.py) against the mean of squares it
replaced (below, as it was), in this process, on the 2-core CPU. Writes CSV to stdout, one row per measurement:

- network_epochs_per_s: 5 AnchorNet runs of 5 members (seeds 0-4) as one pack on the paper MLP (784-100-100-100-10,
  batch 128, glorot init), one epoch of 24,000 random rows, no early stop, after an untimed warm-up of each form;
  4 rounds, the order alternating;
- max_weight_difference: after that epoch, the largest difference of any weight from the mean-of-squares form's;
  the control is the mean of squares computed in float64 and rounded back (only the rounding differs).
"""
import time

import torch

from bench.config import make_protocol
from bench.conformance import toy_split
from bench.training.loop import train_pack
from bench.training.packs import packed_method
from methods import REGISTRY
from methods import anchor_net

NORM = anchor_net.anchor_distance


def mean_of_squares(params, anchors):  # dare-bench 0.6.2's anchor_distance
    return torch.stack([(p - a).square().flatten(1).mean(dim=1) for p, a in zip(params, anchors)]).mean(dim=0)


def float64_control(params, anchors):
    return mean_of_squares([p.double() for p in params], [a.double() for a in anchors]).float()


FORMS = {"squared_norm": NORM, "mean_of_squares": mean_of_squares, "mean_of_squares_float64_control": float64_control}
print("what,form,round,value")

P = make_protocol({"hidden": (100, 100, 100), "epochs": 1, "batch_size": 128, "early_stop_acc": None, "val_size": 1000,
                   "init": "glorot"})
TR, VA = toy_split(24000, 784, 10, seed=1), toy_split(1000, 784, 10, seed=2)


def train_once(term):
    anchor_net.anchor_distance = term  # AnchorNet.penalty looks the function up in its module at each step
    runs = [REGISTRY["anchor_net"](members=5, checkpoint="best") for _ in range(5)]
    t = time.perf_counter()
    result = train_pack([(m, s) for s, m in enumerate(runs)], packed_method(runs), P, TR, 10, progress=False, val=VA)
    dt = time.perf_counter() - t
    return dt, torch.cat([p.detach().flatten() for r in result for p in r.model.parameters()])


for form in ("squared_norm", "mean_of_squares"):
    train_once(FORMS[form])
weights = {}
for rnd in range(4):
    for form in (("squared_norm", "mean_of_squares") if rnd % 2 == 0 else ("mean_of_squares", "squared_norm")):
        dt, weights[form] = train_once(FORMS[form])
        print(f"network_epochs_per_s,{form},{rnd},{25 / dt:.2f}", flush=True)
_, weights["mean_of_squares_float64_control"] = train_once(float64_control)
anchor_net.anchor_distance = NORM
for form in ("squared_norm", "mean_of_squares_float64_control"):
    print(f"max_weight_difference,{form},0,{(weights[form] - weights['mean_of_squares']).abs().max().item():.3g}")
