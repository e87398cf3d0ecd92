"""tractable.hmm: hidden Markov models distilled from an LM, and P-GCD (paper 002 §4).

* :class:`HMM` (:mod:`.model`) — π, A, B; scaled forward/backward, sampling, save/load.
* :mod:`.samples` — task-conditioned LM samples in a resumable, sharded store;
  :mod:`.lvd` — latent variable distillation (k-means of LM hidden states) initialisation;
  :mod:`.em` — Baum–Welch EM with held-out early stopping; :mod:`.em_distributed` —
  data-parallel EM over ``torch.distributed``; :mod:`.distill` — the pipeline
  (``tractable distill`` / ``python -m tractable.hmm.distill``); :mod:`.task` — the same for
  a model already in memory, cached (:func:`~.task.distill_task_hmm`, used by the demo).
* :class:`HMMAutomatonProduct` (:mod:`.product`) — HMM × automaton (Thm. 4.4, Algorithm 1).
* :class:`PGCD`, :func:`pgcd_logits_processor` (:mod:`.pgcd`) — the P-GCD proposal and
  potential (§4.3).
"""

from .model import HMM
from .pgcd import PGCD, PGCDLogitsProcessor, pgcd_logits_processor, pgcd_proposal
from .product import HMMAutomatonProduct, ProductState, token_classes

__all__ = [
    "HMM",
    "HMMAutomatonProduct",
    "ProductState",
    "token_classes",
    "PGCD",
    "PGCDLogitsProcessor",
    "pgcd_logits_processor",
    "pgcd_proposal",
]
