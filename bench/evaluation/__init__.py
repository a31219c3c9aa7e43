"""Evaluation: predictions to numbers. The metrics, selective prediction, the prediction contract and the catalog of metric columns."""
