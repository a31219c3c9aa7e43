"""Bad input to the paper protocol: one line, exit 2, before training; delta and threshold together."""

import pytest

import bench.execution.executors as executors
import methods
from bench.cli.main import main
from bench.config import make_protocol, make_run_config
from bench.errors import ConfigError
from bench.design.grid import expand_grid
from bench.config import load_preset
from methods.base import Method
from methods.dare import DARE

QUIET = ["--no-download", "-q", "--no-plots"]


# -- bad input: one line, exit 2, before training ---------------------------------------------------

@pytest.mark.parametrize("args, message", [
    (["--methods", "dare", "-o", "dare.delta=-0.1"], "delta='-0.1' is out of range"),
    (["--methods", "dare", "-o", "dare.delta=nan"], "delta='nan' is out of range"),
    (["--methods", "dare", "-o", "dare.delta=inf"], "delta='inf' is out of range"),
    (["--methods", "dare", "-o", "dare.delta=0.25", "-o", "dare.threshold=0.3"], "give delta or threshold, not both"),
    (["--methods", "dare", "-o", "dare.threshold=none"], "method dare: give threshold or delta"),
    (["--methods", "deep_ensemble", "-o", "loss=hinge"], "loss='hinge' is out of range; allowed: ce or mse"),
    (["--methods", "dare", "-o", "checkpoint=latest"], "checkpoint='latest' is out of range"),
    (["--methods", "deep_ensemble", "-o", "checkpoint=last_below_threshold"],
     "checkpoint=last_below_threshold needs a method with a threshold (deep_ensemble has none)"),
    (["--methods", "deep_ensemble", "-o", "checkpoint=best", "--val-size", "0"], "needs a validation split"),
    (["--ood-sets", "mnist"], "OOD set 'mnist' is not known for in-distribution mnist (known: fashion_mnist"),
    (["--id-dataset", "fashion_mnist", "--ood-sets", "svhn"],
     "unknown OOD set 'svhn' (known for in-distribution fashion_mnist: mnist, cifar10_gray28, letters, block_shuffled"),
    (["--split-seed", "each"], "split_seed='each' is not valid"),
    (["--init", "he"], "init='he' is out of range; allowed: torch or glorot"),
    (["--adam-eps", "0"], "adam_eps='0' is out of range"),
    (["--preprocess", "raw256"], "preprocess='raw256' is out of range; allowed: raw or raw255 or standardize"),
])
def test_bad_paper_protocol_input_is_one_line_and_exit_2(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(executors, "run_pack", lambda *a, **k: pytest.fail("trained despite bad input"))
    assert main(["run", "--out", str(tmp_path), "--data-dir", str(tmp_path), *QUIET, *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and err.startswith("dare-bench: error: ")


def test_delta_with_threshold_none_is_fine():
    name, values = load_preset("seed")
    configs = expand_grid(name, values, ["dare"], [0], {}, ["dare.delta=0.25", "dare.threshold=none"])
    assert (configs[0].method_options["delta"], configs[0].method_options["threshold"]) == (0.25, None)


def test_dare_with_delta_needs_a_validation_split(tiny_data, tmp_path, capsys):
    assert main(["run", "--data-dir", str(tiny_data), "--out", str(tmp_path), *QUIET, "--methods", "dare",
                 "-o", "dare.delta=0.25", "--val-size", "0"]) == 2
    assert capsys.readouterr().err == ("dare-bench: error: method dare: delta=0.25 sets tau from the reference's "
                                       "validation loss; set val_size > 0\n")


def test_a_reference_that_is_not_valid_is_named_as_the_reference(clean_registry):
    class NeedsBadReference(Method):
        name = "needs_bad_reference"
        summary = "names a reference run with an invalid option"

        def references(self):
            return {"base": ("deep_ensemble", {"members": 0})}

    methods.register(NeedsBadReference, "test")
    config = make_run_config("needs_bad_reference", {}, make_protocol({}), 0)
    with pytest.raises(ConfigError, match=r"needs_bad_reference\(checkpoint=none\) needs a reference run \(base\), "
                                          r"and it is not valid: method deep_ensemble: members=0 is out of range"):
        config.references()


def test_delta_on_the_command_line_replaces_a_presets_threshold():
    name, values = load_preset("seed")  # its dare has threshold = 0.3
    configs = expand_grid(name, values, ["dare"], [0], {}, ["dare.delta=0.5"])
    assert configs[0].method_options["delta"] == 0.5 and configs[0].method_options["threshold"] is None
    assert isinstance(configs[0].built_method, DARE)


