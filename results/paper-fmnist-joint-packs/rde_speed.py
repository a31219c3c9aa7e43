"""RDE's repulsion with its gradient written out (dare-bench 0.6.3, methods/rde.py) against the autograd form it
replaced (below, as it was): 5 RDE runs of 5 members (seeds 0-4) as one pack, on the paper MLP (784-100-100-100-10,
batch 128, glorot init), one epoch of 24,000 random rows, no early stop, in this process; three rounds, the order
alternating, after an untimed warm-up of each; then once the autograd form with each run's parameters concatenated in reverse order, a control:
it changes only the order of the sums. max_weight_difference_vs_autograd: the largest difference of any weight after
the epoch from the autograd form's (0 for the autograd form itself: a re-run is bitwise the same). Writes CSV to
stdout."""
import math
import time

import torch

from bench.config import make_protocol
from bench.conformance import toy_split
from bench.training.loop import train_pack
from bench.training.packs import packed_method
from methods import REGISTRY
from methods.rde import RDE

P = make_protocol({"hidden": (100, 100, 100), "epochs": 1, "batch_size": 128, "early_stop_acc": None, "val_size": 1000,
                   "init": "glorot"})
TR, VA = toy_split(24000, 784, 10, seed=1), toy_split(1000, 784, 10, seed=2)


def autograd_repulsion(params):  # dare-bench 0.6.2's methods/rde.py: one run, autograd differentiates
    theta = torch.cat([p.flatten(1) for p in params], dim=1)
    members = theta.shape[0]
    theta = theta - theta.mean(dim=0, keepdim=True).detach()
    sq = theta.square().sum(dim=1)
    d = (sq.unsqueeze(1) + sq.unsqueeze(0) - 2 * theta @ theta.T).clamp_min(0)
    d = d.masked_fill(torch.eye(members, dtype=torch.bool, device=d.device), 0.0)
    median = d.detach().flatten().quantile(0.5)
    gamma = torch.where(median > 0, math.log(members) / median.clamp_min(torch.finfo(d.dtype).tiny),
                        torch.zeros((), dtype=d.dtype, device=d.device))
    k = torch.exp(-gamma * d).sum(dim=1)
    return k / k.detach() / members


def autograd_penalty(self, model, task_loss, batch):
    parts = zip(*(batch.run_parts(p) for p in model.parameters()))
    return torch.cat([autograd_repulsion(list(params)) for params in parts])


def reversed_penalty(self, model, task_loss, batch):  # the control: the same sums in another order
    parts = zip(*(batch.run_parts(p) for p in model.parameters()))
    return torch.cat([autograd_repulsion(list(params)[::-1]) for params in parts])


def train_once(penalty):
    RDE.penalty = penalty
    runs = [REGISTRY["rde"](members=5, checkpoint="best") for _ in range(5)]
    t = time.perf_counter()
    result = train_pack([(m, s) for s, m in enumerate(runs)], packed_method(runs), P, TR, 10, progress=False, val=VA)
    dt = time.perf_counter() - t
    return dt, torch.cat([p.detach().flatten() for r in result for p in r.model.parameters()])


FORMS = {"written_out": RDE.penalty, "autograd": autograd_penalty, "autograd_reversed_control": reversed_penalty}
for form in ("written_out", "autograd"):  # a warm-up of each, untimed: the first pack of a process pays its set-up
    train_once(FORMS[form])
print("form,round,seconds,network_epochs_per_s,max_weight_difference_vs_autograd")
rows, autograd_weights = [], None
for rnd in range(3):
    for form in (("written_out", "autograd") if rnd % 2 == 0 else ("autograd", "written_out")):
        rows.append((form, rnd, *train_once(FORMS[form])))
        autograd_weights = rows[-1][3] if form == "autograd" and autograd_weights is None else autograd_weights
rows.append(("autograd_reversed_control", 0, *train_once(FORMS["autograd_reversed_control"])))
RDE.penalty = FORMS["written_out"]
for form, rnd, dt, weights in rows:
    print(f"{form},{rnd},{dt:.2f},{25 / dt:.2f},{(weights - autograd_weights).abs().max().item():.3g}")
