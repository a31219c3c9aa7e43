"""`list`: the registered methods with their options, the protocol values, the OOD sets, the
shifts and the presets (bench.api.listing)."""
from __future__ import annotations

import argparse

from bench import api
from bench.reporting.published import available_tables, load_published
from bench.cli.arguments import add_command


def add_parser(sub, preset: str | None) -> argparse.ArgumentParser:
    return add_command(sub, "list", help="list registered methods with their options, and the presets")


def run(_args: argparse.Namespace) -> int:
    listed = api.listing()
    print("methods (use -o METHOD.NAME=VALUE):")
    for method in listed.methods:
        joint = " [joint: members share batches and one loss]" if method.joint else ""
        source = "" if method.source == "built in" else f" [from {method.source}]"
        print(f"  {method.name}: {method.summary}{joint}{source}")
        for option in method.options:
            print(f"      {_option(*option)}")
    for name, reason in listed.broken.items():
        print(f"  {name}: not loadable: {reason}")
    print("options every method has:")
    for option in listed.shared_options:
        print(f"      {_option(*option)}")
    print("architectures (--arch; the protocol values each takes, beside init):")
    for name, arch in listed.architectures.items():
        print(f"  {name}: {arch.summary}; options: {', '.join('--' + o for o in arch.options) or 'none'}")
    print("protocol values (flags of `run`):")
    for name, *rest in listed.protocol:
        print(f"  {_option('--' + name.replace('_', '-'), *rest)}")
    print("OOD sets (--ood-sets), per in-distribution set: "
          + "; ".join(f"{k}: {', '.join(v)} (default {v[0]})" for k, v in listed.ood_sets.items()))
    for name, spec in listed.ood_set_specs.items():
        print(f"  {name} [{spec.group} OOD{', optional' if spec.optional else ''}]: {spec.description}")
    print("shifts (`evaluate --shifts`), by family:")
    for name, spec in listed.shifts.items():
        levels = ", ".join(f"{v:g}" for v in spec.levels)
        print(f"  {name} [{spec.family}]: {spec.unit + ' ' if spec.unit else 'one level: '}{levels}"
              + (f" (MNIST-C's: {spec.reference_level:g})" if spec.reference_level else "")
              + ("" if spec.fidelity == "exact" else f"; {spec.fidelity}"))
    print(f"presets: {', '.join(listed.presets)}")
    print("published tables (`paper-table --published`; a preset names its own as compare_to):")
    for name in available_tables():
        table = load_published(name)
        print(f"  {name}: {table.title or '(no card)'}; presets: {', '.join(table.presets) or 'none'}")
    return 0


def _option(name: str, default, allowed: str, help_text: str) -> str:
    return f"{name} = {default!r}  ({allowed}) {help_text}"
