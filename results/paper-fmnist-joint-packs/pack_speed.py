"""BatchEnsemble, Packed-Ensembles and MIMO: 5 runs (seeds 0-4) trained one after another, then as one pack, in
this process, on the paper MLP (784-100-100-100-10, batch 128, the preset's options, glorot init), one epoch of
24,000 random rows, no early stop; two rounds, the order alternating. Writes CSV to stdout."""
import time

from bench.config import make_protocol
from bench.conformance import toy_split
from bench.training.loop import train, train_pack
from bench.training.packs import packed_method
from methods import REGISTRY
P = make_protocol({"hidden": (100, 100, 100), "epochs": 1, "batch_size": 128, "early_stop_acc": None, "val_size": 1000,
                   "init": "glorot"})
TR, VA = toy_split(24000, 784, 10, seed=1), toy_split(1000, 784, 10, seed=2)
OPTS = {"batch_ensemble": {"members": 5}, "packed_ensemble": {"members": 5, "alpha": 2.0, "gamma": 1}, "mimo": {"members": 5}}
print("method,round,mode,seconds,network_epochs_per_s")
for rnd in range(2):
    for name, o in OPTS.items():
        ms = [REGISTRY[name](**o, checkpoint="best") for _ in range(5)]
        for mode in (("alone", "pack") if rnd == 0 else ("pack", "alone")):
            t = time.perf_counter()
            if mode == "alone":
                for s, m in enumerate(ms):
                    train(m, P, TR, 10, s, progress=False, val=VA)
            else:
                train_pack([(m, s) for s, m in enumerate(ms)], packed_method(ms), P, TR, 10, progress=False, val=VA)
            dt = time.perf_counter() - t
            print(f"{name},{rnd},{mode},{dt:.2f},{25 / dt:.2f}", flush=True)
