"""Execution: running the runs. Executors (serial, jobs, Dask, submitit), the runner of one pack, rescoring stored weights."""
