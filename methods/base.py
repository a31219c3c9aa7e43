"""The method API: what a method may change, and what it must return.

A method is a dataclass whose fields are its options (declared with ``bench.options.option`` so
they are validated and listed). The shared training loop asks it for:

* ``n_networks`` / ``dropout_rate`` / ``build_model``: the model to train (by default the protocol's
  architecture, ``bench.models.registry``, with ``n_networks`` independent members);
* ``prepare``: training state kept beside the model (e.g. AnchorNet's anchors), handed back in
  every ``Batch``;
* ``task_loss`` and ``penalty``: the training objective. Independent members (the default): member
  m minimises ``task_m + penalty_m``, each on its own data order. ``joint = True``: every member
  sees the same batches and the one objective is ``(1/M) sum_m task_m + sum_m penalty_m``, so a
  term over all members (their outputs in ``batch.logits``, their parameters in ``model``, or an
  extra forward pass on generated inputs) is simply returned as per-member shares (in a pack of
  joint runs, computed run by run on ``batch.run_parts``). The task loss
  on the validation split also drives checkpointing (the ``checkpoint`` option every method has:
  none, best, or last_below_threshold for methods with a threshold);
* ``training_batch``: the inputs and targets the model trains on, made from the loop's batch (MIMO
  gives each head its own shuffle of it);
* ``lr_factor`` and ``after_step``: the learning rate along the schedule (a multiple of the
  protocol's) and what is collected from the weights after each optimiser step (snapshot ensembles'
  cyclic rate and snapshots, SWAG's moments). ``fixed_schedule = True``: the method trains the
  whole schedule (the protocol's early stop does not apply) and takes no checkpoint rule;
* ``post_fit``: post-hoc steps after training, on the validation split (the ``temperature`` option
  every method has: none, or fit one temperature that every prediction's logits are divided by),
  and on the training split for a method that says ``post_fit_uses_train = True`` (Laplace);
* ``predictive_model``: the module whose members' logits are the predictions (default: the trained
  model; a method may return one built from what it collected, e.g. SWAG's weight samples);
* ``predict``: test-time probabilities, shape (samples, N, classes), plus the method's own
  per-sample OOD scores, if any (``own_scores``). Samples are ensemble members or stochastic
  passes; every evaluator works from these arrays.

A method that depends on another run (DARE's relative threshold needs the validation loss of a
deep ensemble of the same seed) names it in ``references`` and receives its finished record in
``bind``; the grid runs or reuses the reference first, through the run store.
"""
from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from bench.errors import ConfigError
from bench.evaluation.calibration import fit_temperature
from bench.evaluation.scores import DEFAULT_SCORE
from bench.models.registry import ARCHITECTURES, ArchSpec
from bench.models.stacked import StackedNetwork
from bench.options import choice

PREDICT_CHUNK = 8192  # rows per forward pass at test time: bounds memory for large test sets
CHECKPOINT_RULES = ("none", "best", "last_below_threshold")
FITTED_TEMPERATURE = "fitted_temperature"  # the model attribute and record field of a fitted temperature
# the hooks each capability vouches for (Method.declares): a subclass overriding one must declare it again
_STEP_HOOKS = ("training_batch", "training_forward", "task_loss", "penalty")
CAPABILITY_HOOKS = {
    "capturable": _STEP_HOOKS,
    "packable": (*_STEP_HOOKS, "build_model", "prepare", "stack_states", "lr_factor", "after_step", "post_fit",
                 "predictive_model"),
}


class ReferenceFailed(Exception):
    """A run this run depends on did not finish with usable results."""


@dataclasses.dataclass(frozen=True)
class Batch:
    """One training step's data, as a penalty sees it."""
    x: torch.Tensor        # (M, B, D), each member its own batch; one joint run: (B, D), shared
    y: torch.Tensor        # (M, B)
    logits: torch.Tensor   # (M, B, K), with the graph: a penalty may differentiate through it
    state: Any = None      # what the method's ``prepare`` returned (``stack_states`` of a pack's runs)
    runs: int = 1          # a pack of joint runs: this many runs' members, in equal consecutive groups
    train_size: int = 0    # rows of the training split (a whole-data term per row, as VI's KL / N, reads it)

    def run_parts(self, t: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """A tensor stacked on the member axis, split into each run's members (views). A joint
        method computes its coupling term run by run on these, so runs of a pack stay independent."""
        return t.split(t.shape[0] // self.runs)


def cross_entropy_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy per member. logits (M, B, K), targets (M, B) -> (M,)."""
    members, batch, classes = logits.shape
    per_sample = F.cross_entropy(logits.reshape(-1, classes), targets.reshape(-1), reduction="none")
    return per_sample.view(members, batch).mean(dim=1)


def scaled_mse_loss(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """The DARE paper's MSE per member: mean over samples and classes of (output - K*onehot)^2,
    on the raw linear outputs, K = number of classes. logits (M, B, K), targets (M, B) -> (M,)."""
    classes = logits.shape[-1]
    # scatter, not F.one_hot: the same values, without one_hot's range check (a host read on a GPU)
    target = torch.zeros_like(logits).scatter_(-1, targets.unsqueeze(-1), float(classes))
    return (logits - target).square().mean(dim=(1, 2))


TASK_LOSSES = {"ce": cross_entropy_loss, "mse": scaled_mse_loss}


def checkpoint_mask(rule: str, val_loss: torch.Tensor, best_so_far: torch.Tensor,
                    threshold: float | None) -> torch.Tensor:
    """Which members' current weights replace their saved checkpoint after this epoch.

    best: strictly lower than the best so far (ties keep the earlier epoch);
    last_below_threshold: validation loss <= threshold (a later qualifying epoch replaces an earlier one).
    """
    if rule == "best":
        return val_loss < best_so_far
    if rule == "last_below_threshold":
        return val_loss <= threshold
    return torch.zeros_like(val_loss, dtype=torch.bool)


@torch.no_grad()
def forward_in_chunks(model: torch.nn.Module, x: torch.Tensor, dropout: Any = False) -> torch.Tensor:
    """A module's (M, N, K) outputs for x (N, D) or (M, N, D), in chunks of rows (bounded memory);
    ``dropout`` as the module's forward takes it."""
    return torch.cat([model(chunk, dropout=dropout) for chunk in x.split(PREDICT_CHUNK, dim=-2)], dim=1)


@dataclasses.dataclass(frozen=True)
class Method:
    name: ClassVar[str] = ""
    summary: ClassVar[str] = ""
    has_threshold: ClassVar[bool] = False  # may use checkpoint=last_below_threshold
    joint: ClassVar[bool] = False  # members share batches and one objective (see the module docstring)

    # Capabilities a class declares, vouching for its own training hooks (``declares``): a subclass keeps
    # one until it overrides a hook the capability depends on (a new penalty may couple members, a new
    # training_batch may draw on the host), and then has it only by declaring it again.
    #
    # Packs (bench.training.packs): runs of one method and protocol (their seeds' splits may differ) may train as
    # one stacked computation when the method draws nothing from torch's global generator while
    # training (a run's own draws come from its own generator, kept in ``prepare``'s state). A joint
    # method packs too when its coupling terms are computed run by run (``Batch.run_parts``); the runs
    # of a joint pack have equal member counts. The options named in pack_options may differ between
    # the runs of a pack: where they differ each becomes a per-network tensor, so the method must work
    # with the option as a number or such a tensor.
    packable: ClassVar[bool] = False
    pack_options: ClassVar[tuple[str, ...]] = ()
    fixed_schedule: ClassVar[bool] = False  # collects its ensemble along the schedule: no early stop, no checkpoint
    post_fit_uses_train: ClassVar[bool] = False  # post_fit is handed the training split too
    # The step may be captured in a CUDA graph and replayed (``bench.training.graphs``): it reads nothing
    # back to the host, draws nothing from a CPU generator, and keeps its training state in tensors it
    # updates in place.
    capturable: ClassVar[bool] = False
    # why temperature=fit is refused, if it is (the predictive is no softmax of the logits T would scale)
    temperature_unsupported: ClassVar[str] = ""
    # the architecture's layer kind the method's model is made of (bench.models.registry.LAYER_KINDS): a
    # protocol whose architecture does not build it is refused in check_protocol
    layers: ClassVar[str] = "members"

    @classmethod
    def declares(cls, capability: str) -> bool:
        """Whether the class has a capability (``packable``, ``capturable``): the nearest class in its
        MRO that sets it says so, and no class between overrides a hook the capability vouches for."""
        hooks = CAPABILITY_HOOKS[capability]
        for klass in cls.__mro__:
            if capability in vars(klass):
                return bool(vars(klass)[capability])
            if any(hook in vars(klass) for hook in hooks):
                return False
        return False

    @classmethod
    def capturable_steps(cls) -> bool:
        """Whether the class's training step may be captured (``declares("capturable")``)."""
        return cls.declares("capturable")

    @classmethod
    def packs_runs(cls) -> bool:
        """Whether runs of the class may pack (``declares("packable")``)."""
        return cls.declares("packable")

    checkpoint: str = choice("none", CHECKPOINT_RULES,
                             help="per member, after every epoch, on the validation task loss: none (keep the "
                             "final weights), best (restore the best epoch), last_below_threshold (the last "
                             "epoch whose loss <= the method's threshold; final weights if none)")
    temperature: str = choice("none", ("none", "fit"), implicit=True,
                              help="post-hoc temperature scaling (Guo et al. 2017): none, or fit: after training, one "
                              "temperature T fitted on the validation split by the NLL of the averaged softmax of "
                              "the dropout-free logits / T; every prediction then divides its logits by T "
                              "(recorded as fitted_temperature)")

    @classmethod
    def check_options(cls, values: dict[str, Any], what: str) -> dict[str, Any]:
        """Checks across options, after each was validated on its own."""
        if values.get("temperature") == "fit" and cls.temperature_unsupported:
            raise ConfigError(f"{what}: temperature=fit is not supported: {cls.temperature_unsupported}")
        if values.get("temperature") == "fit" and values.get("loss", "ce") != "ce":
            raise ConfigError(f"{what}: temperature=fit scales logits, and loss={values['loss']} trains outputs "
                              "that are no logits; use loss=ce")
        if cls.fixed_schedule and values.get("checkpoint", "none") != "none":
            raise ConfigError(f"{what}: checkpoint={values['checkpoint']} would restore one epoch's weights, but "
                              f"{cls.name} collects its ensemble along the whole schedule; use none")
        if values.get("checkpoint") == "last_below_threshold" and not cls.has_threshold:
            raise ConfigError(f"{what}: checkpoint=last_below_threshold needs a method with a threshold "
                              f"({cls.name} has none); use none or best")
        return values

    def check_protocol(self, protocol: Any, what: str) -> None:
        """Checks of the options against the run's protocol (``bench.config.Protocol``: its
        ``n_classes``, ``val_size``, ...), made while a grid is validated, before anything trains.
        Raise ConfigError with one line. Call super() when overriding."""
        if self.checkpoint != "none" and protocol.val_size == 0:
            raise ConfigError(f"{what}: checkpoint={self.checkpoint} needs a validation split; set val_size > 0")
        if self.temperature == "fit" and protocol.val_size == 0:
            raise ConfigError(f"{what}: temperature=fit needs a validation split; set val_size > 0")
        arch = ARCHITECTURES[protocol.arch]
        if self.layers not in arch.layers:
            raise ConfigError(f"{what}: its networks are {self.layers} layers, and arch={arch.name} builds "
                              f"{', '.join(arch.layers)} only")

    @property
    def n_networks(self) -> int:
        return self.members  # type: ignore[attr-defined]

    @property
    def dropout_rate(self) -> float:
        return 0.0

    def build_model(self, seed: int, member_ids: list[int], arch: ArchSpec) -> StackedNetwork:
        """The model to train: any module with a ``members`` attribute whose ``forward(x, dropout)``
        maps (N, D) or (M, N, D) input rows to (M, N, K) outputs. Default: the protocol's architecture
        (``arch``, bench.models.registry) with independent members, member i initialised from the
        (seed, member_ids[i]) stream, dropout at ``dropout_rate``."""
        return arch.build(seed, member_ids, dropout=self.dropout_rate, per_network_kernels=self.packs_runs())

    def prepare(self, model: StackedNetwork, seed: int, member_ids: list[int]) -> Any:
        """Training state kept beside the model, passed back as ``Batch.state``."""
        return None

    def stack_states(self, states: list[Any]) -> Any:
        """The ``prepare`` states of the runs of a pack as one: None, or tensors stacked on the member
        axis (a list of them, position by position)."""
        if all(s is None for s in states):
            return None
        return [torch.cat(parts) for parts in zip(*states)]

    @property
    def label(self) -> str:
        """Short name for tables (the paper table matches published rows by it)."""
        return self.name

    @property
    def primary_score(self) -> str:
        """The OOD score this method is reported with (the paper table uses it)."""
        return DEFAULT_SCORE

    def references(self) -> dict[str, tuple[str, dict[str, Any]]]:
        """Runs needed first, by role: role -> (method name, options). Same protocol and seed."""
        return {}

    def bind(self, references: dict[str, dict]) -> tuple["Method", dict[str, Any]]:
        """The method to train, given the finished records of ``references``, and values to record.
        Raises ReferenceFailed when a reference is unusable."""
        return self, {}

    @property
    def checkpoint_threshold(self) -> float | None:
        """The validation-loss bound of checkpoint=last_below_threshold."""
        return None

    @property
    def takes_checkpoints(self) -> bool:
        """Whether any network's weights are checkpointed (a rule other than none)."""
        return self.checkpoint != "none"

    def checkpoint_saves(self, val_loss: torch.Tensor, best_so_far: torch.Tensor) -> torch.Tensor:
        """Which networks' current weights replace their checkpoint after an epoch, by the
        ``checkpoint`` rule: (M,) bool from each network's validation loss and best loss so far."""
        return checkpoint_mask(self.checkpoint, val_loss, best_so_far, self.checkpoint_threshold)

    def capturable_step(self) -> bool:
        """Whether the training step can be captured in a CUDA graph (bench.training.graphs): the class
        says so (``capturable``: its ``training_batch``, ``training_forward`` and ``penalty`` run inside
        the step and read nothing back, draw nothing on the host) and draws no dropout from torch's
        generator (a method with its own ``training_forward`` draws its masks itself). ``lr_factor``
        and ``after_step`` run around the step, between replays."""
        cls = type(self)  # by the class: a pack's options may be per-network tensors
        return cls.capturable_steps() and (cls.dropout_rate is Method.dropout_rate
                                           or cls.training_forward is not Method.training_forward)

    def training_batch(self, x: torch.Tensor, y: torch.Tensor, state: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """The inputs and targets of one training step, from the loop's batch: x (M, B, D) and y (M, B),
        or for a joint run x (B, D) shared and y (M, B). Default: as they are."""
        return x, y

    def training_forward(self, model: StackedNetwork, x: torch.Tensor, state: Any) -> torch.Tensor:
        """The model's outputs on a training batch (``training_batch``'s x). Default: with dropout,
        ``model(x, dropout=True)``; a method may drop activations its own way (MC dropout's
        per-network masks) and keep the draws' counter in ``state``."""
        return model(x, dropout=True)

    def lr_factor(self, step: int, total_steps: int) -> float:
        """The protocol's learning rate is multiplied by this for optimiser step ``step`` (0-based) of
        ``total_steps`` (epochs x steps per epoch). Default: 1, a constant rate."""
        return 1.0

    def after_step(self, model: StackedNetwork, state: Any, step: int, total_steps: int) -> None:
        """Called without gradients after optimiser step ``step`` (0-based) of ``total_steps``: where
        a method collects weights along its trajectory (into the model's buffers, so that they are
        saved with its weights). Default: nothing."""

    def task_loss(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Per-member task loss, (M, B, K), (M, B) -> (M,). Default: cross-entropy."""
        return cross_entropy_loss(logits, targets)

    def penalty(self, model: StackedNetwork, task_loss: torch.Tensor, batch: Batch) -> torch.Tensor | None:
        """Per-member term added to the (weighted) task loss, shape (M,), or None."""
        return None

    def predictive_model(self, model: StackedNetwork) -> torch.nn.Module:
        """The module whose members' logits are the predictions (``logits``). Default: the trained
        model itself. The per-epoch validation loss always reads the trained model."""
        return model

    @torch.no_grad()
    def logits(self, model: StackedNetwork, x: torch.Tensor, dropout: Any = False) -> torch.Tensor:
        """(S, N, K) logits of the predictive model's members for x (N, D), or x (M, N, D), each
        member its own rows; divided by the trained model's fitted temperature once ``post_fit``
        has fitted one."""
        out = forward_in_chunks(self.predictive_model(model), x, dropout)
        temperature = getattr(model, FITTED_TEMPERATURE, None)
        return out if temperature is None else out / temperature

    def post_fit(self, model: StackedNetwork, x_val: torch.Tensor, y_val: torch.Tensor,
                 train: tuple[torch.Tensor, torch.Tensor] | None = None) -> dict[str, Any]:
        """Post-hoc steps on the trained model, on the validation split (and on the training split
        ``train``, (x, y), when ``post_fit_uses_train``), before any prediction; returns the values
        to record. temperature=fit: the model keeps the fitted temperature (an attribute, so it is
        fitted again, identically, when stored weights are scored again)."""
        if hasattr(model, FITTED_TEMPERATURE):  # a fit of an earlier call never carries over
            delattr(model, FITTED_TEMPERATURE)
        if self.temperature == "none":
            return {}
        temperature = fit_temperature(self.logits(model, x_val).cpu().numpy(), y_val.cpu().numpy())
        setattr(model, FITTED_TEMPERATURE, temperature)
        return {FITTED_TEMPERATURE: temperature}

    def predict_proba(self, model: StackedNetwork, x: torch.Tensor) -> torch.Tensor:
        """Softmax of each member (no dropout): (members, N, K)."""
        return self.logits(model, x).softmax(dim=-1)

    def own_scores(self, model: StackedNetwork, x: torch.Tensor) -> dict[str, np.ndarray]:
        """The method's own per-sample OOD scores (higher = more OOD), beside the shared ones."""
        return {}

    def predict(self, model: StackedNetwork, x: torch.Tensor) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(probabilities (samples, N, K), own scores name -> (N,)) as numpy arrays."""
        return self.predict_proba(model, x).cpu().numpy(), self.own_scores(model, x)
