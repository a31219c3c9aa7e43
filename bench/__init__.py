"""dare-bench: a benchmark harness for ensemble uncertainty quantification.

Data flows config -> data -> method -> training loop -> predictions -> evaluators -> tables/plots:
``bench.config`` -> ``bench.data.loaders`` -> ``methods`` -> ``bench.training.loop`` -> ``bench.execution.runner`` ->
``bench.evaluation.metrics`` -> ``bench.store`` / ``bench.reporting`` (``report``, ``figures``).

From Python (notebooks): ``bench.run(...)`` trains a grid and returns its runs as a DataFrame,
``bench.load(out)`` reads a results folder, ``bench.evaluate(out)`` scores its stored weights again
(see ``bench.api``).
"""
from bench.provenance import VERSION as __version__

__all__ = ["__version__", "run", "load", "summary", "ablation_table", "star_table", "evaluate", "shift_table"]


def __getattr__(name: str):
    # the API pulls in torch and pandas: import it only when asked for, so `import bench` stays light
    if name in ("run", "load", "summary", "ablation_table", "star_table", "evaluate", "shift_table"):
        from bench import api
        return getattr(api, name)
    raise AttributeError(f"module 'bench' has no attribute {name!r}")
