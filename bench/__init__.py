"""dare-bench: a benchmark harness for ensemble uncertainty quantification.

Data flows config -> data -> method -> training loop -> predictions -> evaluators -> tables/plots:
``bench.config`` -> ``bench.data`` -> ``methods`` -> ``bench.train`` -> ``bench.runner`` ->
``bench.metrics`` -> ``bench.store`` / ``bench.plots``.
"""
