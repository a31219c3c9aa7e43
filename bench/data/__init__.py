"""Data: the dataset files on disk (files), the OOD sets (ood_sets), a run's splits and OOD sets as
tensors (loaders), the shifts of the ID test split (shifts), images made from data inside installed
packages (rendered) and the disk cache of generated images (image_cache)."""
