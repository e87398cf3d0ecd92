"""Subcommands of the ``tractable`` CLI (see :mod:`tractable.cli`), one module each:

* :mod:`.compile` — ``tractable compile``: a constraint against a tokenizer, its size, saved;
* :mod:`.demo` — ``tractable demo``: unconstrained vs LCD vs GCD on the bundled real model;
* :mod:`.sample` — ``tractable sample``: AWRS, SMC, CARS, GCD or LCD from a local causal LM;
* :mod:`.distill` — ``tractable distill``: an HMM distilled from a language model.
"""
