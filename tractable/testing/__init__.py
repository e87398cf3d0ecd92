"""Brute-force references and hypothesis strategies shared by the tests.

Each topic has its own module: slow, obviously-correct implementations of what the package
computes fast (acceptance by decoding bytes and calling Python's ``re``; masks by enumerating
continuations; ...), and the hypothesis strategies that feed both.  Import the topic module,
e.g. ``from tractable.testing.regex import reference_accepts``.  In pipeline order:

* :mod:`.regex` — regex automata against ``re.fullmatch``; random patterns and texts;
* :mod:`.json_schema` — the JSON-Schema-Test-Suite runner, instances in every serialization;
* :mod:`.grammar` — grammar membership by brute force (:mod:`tractable.fsa.grammar`);
* :mod:`.masks` — GCD / LCD masks by enumerating continuations within the budget;
* :mod:`.hmm` — HMM likelihoods and P-GCD (HMM × automaton) by summing over all strings;
* :mod:`.samplers` — toy LMs and exact posteriors by enumeration, for the samplers' tests;
* :mod:`.lm_tables` — real-LM rows recorded once and replayed as an LM.
"""
