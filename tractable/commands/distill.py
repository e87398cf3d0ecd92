"""``tractable distill``: distill an HMM from a language model (:mod:`tractable.hmm.distill`)."""

from __future__ import annotations

import argparse

HELP = ("distill an HMM from an LM (sample, then mini-batch EM); "
        "same as python -m tractable.hmm.distill")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from tractable.hmm.distill import add_arguments as add

    add(parser)


def run(args: argparse.Namespace) -> int:
    from tractable.hmm.distill import run as run_distill

    return run_distill(args)
