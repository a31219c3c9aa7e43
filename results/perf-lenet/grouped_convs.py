"""Independent LeNet-5 members' convolutional trunks (conv, max-pool, ReLU; forward and backward),
one training step of batch 256, two ways, alternating in one process on the same tensors:

* member by member: each member's own images through ``F.conv2d`` with its own kernels (how the
  stacked LeNet runs them, bench.models.lenet);
* grouped: member m's images in channel group m of one (batch, M x C, H, W) tensor, one
  ``F.conv2d(..., groups=M)`` per layer (torch-uncertainty's PackedConv2d layout).

    python results/perf-lenet/grouped_convs.py      # -> results/perf-lenet/grouped_convs.csv
"""
import time
from pathlib import Path

import pandas as pd
import torch
import torch.nn.functional as F

from bench.models.lenet import LENET5, LENET5_SAME, conv_layers

BATCH, ROUNDS, STEPS = 256, 3, 5


def trunk(members: int, shape):
    """Random kernels of ``members`` networks, their images, and the two ways of one step."""
    convs = conv_layers(shape, (1, 28, 28), 1)
    g = torch.Generator().manual_seed(0)
    weights = [(torch.randn(members, c.c_out, c.c_in, 5, 5, generator=g) * 0.1).requires_grad_() for c in convs]
    biases = [torch.zeros(members, c.c_out, requires_grad=True) for c in convs]
    images = torch.rand(members, BATCH, 1, 28, 28, generator=g)

    def layer(h, conv, w, b, groups):
        h = F.conv2d(h, w, b, padding=conv.padding, groups=groups)
        return torch.relu(F.max_pool2d(h, 2) if conv.pool else h)

    def one_by_one():
        out = []
        for m in range(members):
            h = images[m]
            for conv, w, b in zip(convs, weights, biases):
                h = layer(h, conv, w[m], b[m], 1)
            out.append(h)
        torch.stack(out).sum().backward()

    def grouped():
        h = images.permute(1, 0, 2, 3, 4).reshape(BATCH, members, 28, 28)
        for conv, w, b in zip(convs, weights, biases):
            h = layer(h, conv, w.flatten(0, 1), b.flatten(), members)
        h.sum().backward()
    return {"member_by_member": one_by_one, "grouped": grouped}


def main() -> None:
    rows = []
    for arch, shape in (("lenet5_same", LENET5_SAME), ("lenet5", LENET5)):
        for members in (5, 10):
            ways = trunk(members, shape)
            for way in ways.values():
                way()  # warm-up: first-call costs
            for round_ in range(ROUNDS):
                for name, way in ways.items():
                    start = time.perf_counter()
                    for _ in range(STEPS):
                        way()
                    rows.append({"arch": arch, "members": members, "way": name, "round": round_,
                                 "step_ms": 1e3 * (time.perf_counter() - start) / STEPS})
    table = pd.DataFrame(rows).assign(threads=torch.get_num_threads(), torch_version=torch.__version__)
    table.to_csv(Path(__file__).with_name("grouped_convs.csv"), index=False, float_format="%.6g")
    best = table.groupby(["arch", "members", "way"])["step_ms"].min().unstack()
    best["grouped / member_by_member"] = best["grouped"] / best["member_by_member"]
    print(best.round(2).to_string())


if __name__ == "__main__":
    main()
