"""One step of a pack of N paper-MLP networks (gather, forward, cross-entropy, backward, fused Adam), its
forward pass and loss eager or under torch.compile (inductor), timed in one process (ms per step).
    python results/device-epoch-cpu/compile_vs_eager.py [N]   (default 25)"""
import time, sys, torch
from bench.models.mlp import StackedMLP
from methods.base import cross_entropy_loss
torch.manual_seed(0)
networks, batch, sizes = int(sys.argv[1]) if len(sys.argv) > 1 else 25, 128, (100, 100, 100)
model = StackedMLP.for_seed(0, list(range(networks)), 784, sizes, 10, 0.0, "torch", per_network_kernels=True)
x = torch.rand(60000, 784); y = torch.randint(0, 10, (60000,))
opt = torch.optim.Adam(model.parameters(), lr=1e-3, fused=True)
def objective(m, xb, yb):
    return cross_entropy_loss(m(xb), yb).sum()
compiled = torch.compile(objective)
def step(fn):
    idx = torch.randint(0, 60000, (networks, batch))
    xb, yb = x.index_select(0, idx.reshape(-1)).view(networks, batch, -1), y.index_select(0, idx.reshape(-1)).view(networks, batch)
    opt.zero_grad(set_to_none=True)
    fn(model, xb, yb).backward()
    opt.step()
def timed(fn, steps=200):
    for _ in range(20): step(fn)
    t = time.perf_counter()
    for _ in range(steps): step(fn)
    return (time.perf_counter() - t) / steps * 1e3
t0 = time.perf_counter(); step(compiled); print(f"compile: {time.perf_counter() - t0:.1f} s")
for rnd in range(2):
    e, c = timed(objective), timed(compiled)
    print(f"round {rnd}: {networks} networks: eager {e:.2f} ms/step, compiled {c:.2f} ms/step, eager/compiled {e / c:.2f}")
