"""Data: the dataset files and their loading (loaders), the OOD sets (ood_sets) and the shifts of the ID test split (shifts)."""
