"""Data: the dataset files on disk (files), the OOD sets (ood_sets), a run's splits and OOD sets as tensors (loaders) and the shifts of the ID test split (shifts)."""
