"""Cards for the five trunks of question (b), which were trained before dare-bench wrote a card beside
each trunk (bench/training/trunk.py writes ``trunks/<key>.json`` for every trunk trained since).

Each card holds what ``trunk_card`` holds: the trunk's run id, seed, architecture and epochs; its test
accuracy, computed here from the stored weights (``trunks/<key>.pt``, not committed); its wall time,
taken from the grid's last progress line "trunk seed S: epoch 50/50 after T s" (the logs of that
grid, dare-bench 0.6.3 at 704ee2e, one thread beside another grid; listed in SECONDS below); and a
note saying so. A trunk that already has a card is left alone.

    DARE_BENCH_DATA=... python results/paper-fmnist-lenet/trunk_cards.py
"""
import json
from pathlib import Path

import torch

from bench import api, provenance
from bench.data.files import resolve_data_dir
from bench.data.loaders import load_benchmark_data
from bench.training.trunk import TRUNKS, _apply, trunk_run

HERE = Path(__file__).resolve().parent
# the grid's last progress line of each trunk; seeds 2 and 3 include a partial trunk lost to a
# restart and a pause while CI was timed
SECONDS = {0: 1282, 1: 1196, 2: 2647, 3: 2170, 4: 1123}
NOTE = ("card written after training (the trunk predates trunk cards): seconds from the grid's progress line "
        "'epoch 50/50 after T s' at dare-bench 0.6.3 at 704ee2e, test_acc computed from the stored weights")


@torch.no_grad()
def card(protocol, seed: int, root: Path) -> dict | None:
    run = trunk_run(protocol, seed)
    path = HERE / TRUNKS / f"{run.run_id}.pt"
    if not path.is_file() or path.with_suffix(".json").is_file():
        return None
    data = load_benchmark_data(run.protocol, root, download=False, seed=seed)
    model = run.built_method.build_model(seed, [0], run.protocol.arch_spec.fitted(data.in_features, data.n_classes))
    model.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))
    accuracy = (_apply(model.as_module(0).eval(), data.test.x).argmax(-1) == data.test.y).double().mean().item()
    return {"run_id": run.run_id, "seed": seed, "arch": run.protocol.arch, "epochs": run.protocol.epochs,
            "seconds": float(SECONDS[seed]), "device": "cpu", "test_acc": accuracy, "note": NOTE, **provenance.stamp()}


def main() -> None:
    root = resolve_data_dir(None)
    protocols = {run.seed: run.protocol for item in api.plan("paper-fmnist-trunk", out=HERE).configs
                 for run in item.runs()}
    for seed, protocol in sorted(protocols.items()):
        about = card(protocol, seed, root)
        if about is not None:
            path = HERE / TRUNKS / f"{about['run_id']}.json"
            path.write_text(json.dumps(about, indent=1) + "\n")
            print(f"seed {seed}: test accuracy {about['test_acc']:.4f}, {about['seconds']:.0f} s -> {path.name}")


if __name__ == "__main__":
    main()
