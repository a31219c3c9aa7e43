"""Where a BatchEnsemble pack first parts from its runs alone: 3 runs of 5 members on the paper MLP, the same
random batches, step by step with fused Adam; prints the first step whose gradients or updated parameters
are not bit for bit those of the runs alone."""
import torch
from bench.models.registry import ArchSpec
from methods import REGISTRY
from methods.base import cross_entropy_loss
torch.manual_seed(0)
be = REGISTRY["batch_ensemble"](members=5)
models = [be.build_model(s, list(range(5)), ArchSpec.mlp(784, (100, 100, 100), 10, "glorot")) for s in range(3)]
pack = type(models[0]).stack(models)
oa = [torch.optim.Adam(m.parameters(), lr=1e-3, eps=1e-7, fused=True) for m in models]
op = torch.optim.Adam(pack.parameters(), lr=1e-3, eps=1e-7, fused=True)
for step in range(40):
    x = torch.rand(3, 128, 784) * 255; y = torch.randint(0, 10, (3, 128))
    for o in oa: o.zero_grad()
    op.zero_grad()
    for r, m in enumerate(models):
        cross_entropy_loss(m(x[r]), y[r].expand(5, -1)).sum().backward()
    cross_entropy_loss(pack(x.repeat_interleave(5, dim=0)), y.repeat_interleave(5, dim=0)).sum().backward()
    g_same = all(torch.equal(p.grad, torch.cat([dict(m.named_parameters())[n].grad for m in models])) for n, p in pack.named_parameters())
    for o in oa: o.step()
    op.step()
    p_same = all(torch.equal(p.detach(), torch.cat([dict(m.named_parameters())[n].detach() for m in models])) for n, p in pack.named_parameters())
    if not (g_same and p_same):
        print("step", step, "grads equal", g_same, "params equal after step", p_same); break
else:
    print("40 steps bitwise equal")
