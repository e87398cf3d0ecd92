"""tractable.fsa — constraints compiled to token-level NFAs (paper 002, §3.1, Def. 3.2)."""
