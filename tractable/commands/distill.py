"""``tractable distill``: distill an HMM from a language model (:mod:`tractable.hmm.distill`).

Task-conditioned samples (``--prompts FILE``, chat template), LVD initialisation (``--lvd``),
EM with held-out early stopping (``--holdout``, ``--patience``), data-parallel EM
(``--world-size N`` local processes, or under torchrun:
``torchrun --nproc-per-node N -m tractable.hmm.distill --stage train --out DIR ...``).
"""

from __future__ import annotations

import argparse

HELP = ("distill an HMM from an LM: task-prompted samples (sharded, resumable), LVD init "
        "(--lvd), EM with held-out early stopping, data-parallel EM (--world-size / torchrun); "
        "same as python -m tractable.hmm.distill")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tractable.hmm.distill import add_arguments as add

    add(parser)


def run(args: argparse.Namespace) -> int:
    from tractable.hmm.distill import run as run_distill

    return run_distill(args)
