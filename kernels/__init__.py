"""tractable.kernels: batched GPU kernels for masks and P-GCD, each beside a torch reference.

One module per op (see each module's docstring for the semantics as a loop and the shapes):

* :mod:`.token_mask`: GCD / LCD masks from state sets and budgets → packed int32 [B, V/32];
* :mod:`.apply_mask`: −inf on logits from the packed mask, fused temperature / (log-)softmax;
* :mod:`.reachability`: forward state-set advance (eq. 3), backward budget tables (eq. 4),
  distance to acceptance;
* :mod:`.hmm_product`: P-GCD forward / backward messages of HMM × automaton (Algorithm 1,
  eq. 5) and the fused next-token emission term.

Every public op takes ``backend="auto" | "triton" | "torch"`` (auto: Triton on CUDA tensors,
torch otherwise).  Triton is imported lazily, on the first Triton call, by :mod:`._triton`
(backend resolution, interpreter mode); :mod:`._common` holds the constants the mask and
reachability kernels share.
"""

from __future__ import annotations

from ._triton import KernelBackendError, interpret_mode, resolve_backend, triton_available
from .apply_mask import apply_mask, apply_mask_ref
from .hmm_product import (
    EdgeCSR,
    TokenClasses,
    edge_csr,
    emission_marginal,
    emission_marginal_ref,
    emission_term,
    emission_term_ref,
    hmm_backward_messages,
    hmm_backward_messages_ref,
    hmm_forward_step,
    hmm_forward_step_ref,
    kron_transition,
)
from .reachability import (
    advance,
    advance_ref,
    backward_reachability,
    backward_reachability_ref,
    distance_to_accept,
    distance_to_accept_ref,
    label_nonempty,
)
from .token_mask import (
    UNREACHABLE,
    MaskTables,
    pack_mask,
    prepare_mask,
    token_mask,
    token_mask_ref,
    unpack_mask,
)

__all__ = [
    "KernelBackendError",
    "interpret_mode",
    "resolve_backend",
    "triton_available",
    "UNREACHABLE",
    "MaskTables",
    "prepare_mask",
    "token_mask",
    "token_mask_ref",
    "unpack_mask",
    "pack_mask",
    "apply_mask",
    "apply_mask_ref",
    "advance",
    "advance_ref",
    "backward_reachability",
    "backward_reachability_ref",
    "distance_to_accept",
    "distance_to_accept_ref",
    "label_nonempty",
    "EdgeCSR",
    "TokenClasses",
    "edge_csr",
    "kron_transition",
    "emission_marginal",
    "emission_marginal_ref",
    "emission_term",
    "emission_term_ref",
    "hmm_forward_step",
    "hmm_forward_step_ref",
    "hmm_backward_messages",
    "hmm_backward_messages_ref",
]
