"""tractable.fsa — constraints compiled to token-level NFAs (paper 002, §3.1, Def. 3.2).

Three layers, in pipeline order ``TokenVocabulary → byte NFA → TokenAutomaton → state → mask``;
a layer imports only the layers above it in this list (checked by
``tests/fsa/test_import_graph.py``):

Front ends (sub-packages): a constraint → a byte-level NFA → a token automaton

* ``regex/`` — regular expressions (Python ``re`` syntax, exact lookaround);
* ``json_schema/`` — JSON Schema (Draft 2020-12, 7, 6, 4), every serialization or canonical;
* ``grammar/`` — Lark / GBNF / EBNF grammars: regular approximations and the exact checker;
* :mod:`.structural_tag` — free text with constrained regions (a composition of the above).

The core: vocabulary, byte NFAs, the lift to tokens, the automaton, per-request state, masks

* :mod:`.vocabulary` — :class:`TokenVocabulary`, the exact bytes of every token id, and its
  fingerprint; :mod:`.vocabulary_cache` (vocabularies read from tokenizer files, kept on disk
  once per machine);
* :mod:`.nfa` — :class:`ByteNFA` and its combinators; :mod:`.nfa_subsets` (partial subset
  construction on whitespace edges), :mod:`.nfa_bisim` (bisimulation reduction),
  :mod:`.nfa_determinize` (DFA sizes, for reports), :mod:`.nfa_automata_lib` (bridge to
  automata-lib, tests and benchmarks only);
* :mod:`.lift` — byte NFA × vocabulary → token edges, built from :mod:`.class_trie`
  (per-vocabulary tables and class tries), :mod:`.lift_subsets` (interned state sets),
  :mod:`.lift_components` (components and their walk records), :mod:`.lift_periodic` (counted
  repetitions from one walk of their body) and :mod:`.token_rows` (packed token-set rows);
  :mod:`.lift_budget` charges its large arrays to a memory budget (``LiftSizeError``);
* :mod:`.automaton` — :class:`TokenAutomaton` (T_out, T_in, packed labels B) and
  :mod:`.automaton_file` (save/load: format version, checksum, vocabulary fingerprint);
* :mod:`.state` — :class:`AutomatonState`, the small, batched, reorderable per-request state;
* :mod:`.distance` (distances to acceptance: eq. 4's messages), :mod:`.mask_rows` (per-state
  prefix rows) and :mod:`.masks` — budget-aware GCD / LCD masks (paper 002 eqs. 2–4);
* on top of masks and states, for decoders: :mod:`.jump_forward` (forced continuations) and
  :mod:`.speculative` (verify a draft of k tokens);
* on top of the front ends and the core: :mod:`.automaton_load` (:func:`load_automaton`, any
  saved automaton, plain or with its ``uniqueItems`` checker).

Shared helpers (leaf modules, imported by every layer)

* :mod:`.arrays` — integer-array primitives (ranges, sorted unique, run starts, stable argsort,
  unique inverse);
* :mod:`.bits` — bit-packed token sets, bool [..., V] ⇄ int32 [..., ceil(V/32)];
* :mod:`.errors` — the typed errors (:class:`~.errors.TractableError` and subclasses);
* :mod:`.progress` — opt-in progress lines of long compiles (:func:`~.progress.compile_progress`).
* :mod:`.gc_pause` — the cyclic garbage collector paused while a compile runs (1.5–1.8× on
  large schemas).

The public names are re-exported by :mod:`tractable` (``tractable.compile_regex`` …); the
modules here are the implementation and their import paths are stable.
"""
