"""Training: the one training loop for every method (loop), packs of runs trained as one stacked computation (packs), and its timing against the matmul peak (perf)."""
