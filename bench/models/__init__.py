"""Networks with members stacked on a leading axis, and the architecture registry
(``bench.models.registry``): the stacked MLP, LeNet-5, and their BatchEnsemble and Packed-Ensembles
layer kinds."""
