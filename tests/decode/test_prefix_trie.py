"""The prefix trie shared by CARS and ASAp: both update rules against the definition computed by
brute force, the precision of re-summation, batched weights, freezing, and the file format."""

from __future__ import annotations

import numpy as np
import pytest
from tractable.decode.prefix_trie import (
    PrefixTrie,
    TrieFileNotFoundError,
    TrieFormatError,
    TrieFrozenError,
)

V = 6


def _rows(seed: int, depth: int):
    """A random LM over V tokens as {prefix: float64 [V]} for every prefix up to ``depth``."""
    g = np.random.default_rng(seed)
    rows, level = {}, [()]
    for _ in range(depth):
        nxt = []
        for p in level:
            rows[p] = g.dirichlet([0.5] * V)
            nxt.extend(p + (a,) for a in range(V))
        level = nxt
    return rows


def _brute(trie: PrefixTrie, rows: dict, prefix=()) -> float:
    """value(u) = Σ_a P(a|u) [a not dead] value(u·a), 1 off the trie (the definition)."""
    nd = trie.lookup(prefix)
    if nd is None:
        return 1.0
    p0 = rows[prefix]
    tot = 0.0
    for a in range(V):
        if nd.dead is not None and nd.dead[a]:
            continue
        tot += p0[a] * (_brute(trie, rows, prefix + (a,)) if a in nd.children else 1.0)
    return tot


def _random_paths(seed: int, depth: int, n: int):
    g = np.random.default_rng(seed)
    return [tuple(int(a) for a in g.integers(0, V, size=int(g.integers(1, depth + 1))))
            for _ in range(n)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_both_rules_compute_the_definition(seed):
    """Walk random paths; at each node mark random tokens dead.  CARS's mass subtraction and
    ASAp's re-summation give the same values, and both equal the definition at every node."""
    depth = 4
    rows = _rows(seed, depth)
    sub, res = PrefixTrie(V), PrefixTrie(V)
    g = np.random.default_rng(100 + seed)
    for path in _random_paths(seed, depth, 40):
        seen = []
        na, nb = sub.root, res.root
        for i, a in enumerate(path):
            pre = path[:i]
            p0 = rows[pre]
            kill = g.random(V) < 0.25
            kill[a] = False  # keep the path alive
            dead_a = np.zeros(V, bool) if na.dead is None else na.dead
            sub.kill_tokens(na, kill & ~dead_a, p0)
            res.mark_dead(nb, kill)
            seen.append((nb, p0))
            if (na.dead is not None and na.dead[a]) or (nb.dead is not None and nb.dead[a]):
                break
            na = sub.child(na, a, float(p0[a]))
            nb = res.child(nb, a, float(p0[a]))
        for nd, p0 in reversed(seen):
            res.refresh(nd, p0)
    assert sub.num_nodes == res.num_nodes == len(sub.nodes())
    for x, y in zip(sub.nodes(), res.nodes()):
        pre = []
        n = x
        while n.parent is not None:
            pre.append(n.token)
            n = n.parent
        pre = tuple(reversed(pre))
        want = _brute(res, rows, pre)
        assert x.value == pytest.approx(want, rel=1e-9, abs=1e-12)
        assert y.value == pytest.approx(want, rel=1e-12, abs=1e-15)
        assert (x.dead is None) == (y.dead is None)
        assert x.dead is None or np.array_equal(x.dead, y.dead)


def test_kill_drops_subtree_and_subtracts_its_remaining_mass():
    t = PrefixTrie(3)
    p = np.array([0.5, 0.3, 0.2])
    c = t.child(t.root, 0, 0.5)
    t.kill(c, 1, 0.3)  # value(0) = 0.7, root = 1 - 0.5 * 0.3
    assert c.value == pytest.approx(0.7) and t.root.value == pytest.approx(0.85)
    t.kill(t.root, 0, 0.5)  # removes the remaining 0.5 * 0.7
    assert t.root.value == pytest.approx(0.5) and 0 not in t.root.children
    assert t.num_nodes == 1 and t.num_created == 2
    t.kill(t.root, 0, 0.5)  # already dead: no-op
    assert t.root.value == pytest.approx(0.5)
    assert t.refresh(t.root, p) == pytest.approx(0.5)


def test_resummation_keeps_tiny_values_that_subtraction_loses():
    """A chain of 6 nodes where only one continuation of probability 1e-5 stays valid at each
    step: the valid mass 1e-30 is far below float64's resolution of 1.  Re-summation keeps it to
    full relative precision; mass subtraction from 1 cannot (this is why ASAp uses it)."""
    Vs = 2
    p0 = np.array([1 - 1e-5, 1e-5])
    sub, res = PrefixTrie(Vs), PrefixTrie(Vs)
    na, nb = sub.root, res.root
    chain = [nb]
    for _ in range(6):
        sub.kill(na, 0, float(p0[0]))
        res.mark_dead(nb, [0])
        na = sub.child(na, 1, float(p0[1]))
        nb = res.child(nb, 1, float(p0[1]))
        chain.append(nb)
    sub.kill(na, 0, float(p0[0]))
    res.mark_dead(nb, [0])
    for nd in reversed(chain):
        res.refresh(nd, p0)
    assert res.root.value == pytest.approx(1e-35, rel=1e-9, abs=0)
    assert sub.root.value != pytest.approx(1e-35, rel=1e-3, abs=0)  # lost in 1 - (1 - 1e-5) - ...


def test_weights_batched():
    t = PrefixTrie(4)
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25], [0.4, 0.3, 0.2, 0.1]])
    c = t.child(t.root, 2, 0.3)
    t.mark_dead(c, [0])
    t.refresh(c, probs[0])  # value(2) = 0.9
    t.mark_dead(t.root, [3])
    w = t.weights([t.root, None, c], probs)
    assert np.allclose(w[0], [0.1, 0.2, 0.3 * 0.9, 0.0])
    assert np.array_equal(w[1], probs[1])
    assert np.allclose(w[2], [0.0, 0.3, 0.2, 0.1])
    assert t.lookup_many([(2,), (1,), ()]) == [c, None, t.root]
    assert t.bound((2,)) == pytest.approx(0.9) and t.bound((3,)) == 0.0 and t.bound((1, 0)) == 1.0
    with pytest.raises(ValueError, match="probs must be"):
        t.weights([t.root], probs)


def test_freeze_makes_the_trie_read_only():
    t = PrefixTrie(3)
    c = t.child(t.root, 1, 0.5)
    t.freeze()
    for f in (lambda: t.child(t.root, 0, 0.2), lambda: t.kill(c, 0, 0.1),
              lambda: t.mark_dead(c, [0]), lambda: t.refresh(c, np.ones(3) / 3),
              lambda: t.subtract(c, 0.1)):
        with pytest.raises(TrieFrozenError):
            f()
    assert t.child(t.root, 1, 0.5) is c  # an existing child is only looked up
    assert t.lookup((1,)) is c and c.value == 1.0


def _filled(V_: int = 300) -> PrefixTrie:
    g = np.random.default_rng(7)
    t = PrefixTrie(V_, rule="asap")
    for _ in range(30):
        nd = t.root
        for depth, a in enumerate(g.integers(0, V_, size=int(g.integers(1, 5))).tolist()):
            p0 = g.dirichlet(np.ones(V_))
            if nd.dead is None:  # sparse dead masks at even depths, dense (GCD-like) at odd
                kill = g.random(V_) < (0.97 if depth % 2 else 0.05)
                kill[a] = False
                t.mark_dead(nd, kill)
            if nd.dead[a]:
                break
            t.refresh(nd, p0)
            nd = t.child(nd, a, float(p0[a]))
    return t


def test_save_load_round_trip(tmp_path):
    t = _filled()
    t.freeze()
    f = tmp_path / "trie.safetensors"
    t.save(f, {"max_new_tokens": 7, "prompt_ids": [1, 2]})
    u, meta = PrefixTrie.load(f)
    assert meta == {"max_new_tokens": 7, "prompt_ids": [1, 2]}
    assert u.frozen and u.rule == "asap" and u.V == t.V and u.num_nodes == t.num_nodes
    a, b = t.nodes(), u.nodes()
    assert len(a) == len(b) > 20
    assert any(x.dead is not None and x.dead.sum() > t.V // 2 for x in a)  # dense encoding used
    assert any(x.dead is not None and 0 < x.dead.sum() < t.V // 2 for x in a)  # sparse too
    for x, y in zip(a, b):
        assert (x.token, x.prob, x.value) == (y.token, y.prob, y.value)
        assert (x.dead is None and y.dead is None) or np.array_equal(x.dead, y.dead)
        assert list(x.children) == list(y.children)


def test_load_rejects_bad_files(tmp_path):
    with pytest.raises(TrieFileNotFoundError):
        PrefixTrie.load(tmp_path / "missing.safetensors")
    with pytest.raises(FileNotFoundError):
        PrefixTrie.load(tmp_path / "missing.safetensors")
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"not a safetensors file at all")
    with pytest.raises(TrieFormatError, match="not a saved prefix trie"):
        PrefixTrie.load(junk)
    f = tmp_path / "t.safetensors"
    _filled().save(f)
    data = bytearray(f.read_bytes())
    data[-5] ^= 0xFF  # flip a bit in the last tensor
    bad = tmp_path / "tampered.safetensors"
    bad.write_bytes(bytes(data))
    with pytest.raises(TrieFormatError, match="checksum"):
        PrefixTrie.load(bad)
    from safetensors import safe_open
    from safetensors.numpy import load_file, save_file

    with safe_open(str(f), framework="numpy") as h:
        header = dict(h.metadata())
    tensors = load_file(str(f))
    header["version"] = "99"
    other = tmp_path / "v99.safetensors"
    save_file(tensors, str(other), metadata=header)
    with pytest.raises(TrieFormatError, match="version"):
        PrefixTrie.load(other)


def test_cars_save_load(tmp_path):
    """CARS keeps W in the same file format: a loaded CARS has the same p_ε and, from the same
    random state, draws the same samples; another update rule's file is refused."""
    from tractable.decode.cars import CARS

    from tractable.testing.samplers import random_toy

    ex = random_toy(1, num_tokens=3, max_len=3)
    a = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, seed=0)
    a.sample(30)
    f = tmp_path / "cars.safetensors"
    a.save(f)
    b = CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, seed=0).load(f)
    assert b.acceptance_bound == a.acceptance_bound < 1.0
    a.g, b.g = np.random.default_rng(9), np.random.default_rng(9)
    assert a.sample(40) == b.sample(40)
    assert b.acceptance_bound == a.acceptance_bound
    with pytest.raises(TrieFormatError, match="update"):
        CARS(ex.lm, ex.constraint, max_new_tokens=ex.max_new_tokens, update="ars").load(f)
