"""Streaming attention in pure JAX: lax.scan over key blocks, carrying (m, l, acc).

Naive attention materialises the (Sq, Skv) scores because softmax needs a whole
row's max and sum before any probability exists (chapter 4). The online softmax
(Milakov & Gimelshein, 2018) removes that need: walk the keys one block at a
time and keep, per query row,

    m    the running max of the scaled scores seen so far            (B, H, Sq)
    l    the running sum of exp(s - m) over those scores              (B, H, Sq)
    acc  the running sum of exp(s - m) · v over those keys            (B, H, Sq, D)

When block j raises the max from m to m_new, everything accumulated so far was
exponentiated against the old max; multiplying by alpha = exp(m - m_new)
rescales it to the new one:

    m_new = max(m, rowmax(s_j))
    p     = exp(s_j - m_new)
    l     = alpha · l   + rowsum(p)
    acc   = alpha · acc + p · v_j

Invariant (checked by the tests): after step j, acc / l is exactly attention over
keys [0, (j + 1) · block_k). After the last step it is the answer. In the forward
pass nothing of size Sq × Skv exists; the largest intermediate is one
(Sq, block_k) block of scores. (jax.grad of it saves every step's block of
probabilities, the whole Sq × Skv again: the README's "Gradients bring the N²
back".) This is the algorithm every flash-attention kernel runs; chapter 13
moves it into VMEM.

Numerics follow the course's attention contract: scores, m, l and acc in f32;
the probabilities are rounded to v's dtype before the P·V product (as a kernel
feeding the MXU does); the output is rounded once to q's dtype. Causal masks
are aligned top-left (query i sees keys 0..i), so block 0 always holds a visible
key for every query and m is finite from the first step on.
"""

import jax
import jax.numpy as jnp
from jax import lax


def streaming_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                        scale: float | None = None, block_k: int = 128) -> jax.Array:
    """softmax(q kᵀ · scale) v, one key block at a time; q (B, H, Sq, D), k and v (B, Hkv, Skv, D)."""
    (_, l, acc), _ = _scan(q, k, v, causal=causal, scale=scale, block_k=block_k, keep_states=False)
    return (acc / l[..., None]).astype(q.dtype)


def streaming_states(q: jax.Array, k: jax.Array, v: jax.Array, *, causal: bool = False,
                     scale: float | None = None, block_k: int = 128):
    """(m, l, acc) after every key block, stacked: (n, B, H, Sq), (n, B, H, Sq), (n, B, H, Sq, D), f32."""
    _, states = _scan(q, k, v, causal=causal, scale=scale, block_k=block_k, keep_states=True)
    return states


def _scan(q, k, v, *, causal, scale, block_k, keep_states):
    b, h, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    if h % hkv:
        raise ValueError(f"{h} query heads cannot be shared by {hkv} kv heads")
    if skv % block_k:
        raise ValueError(f"block_k={block_k} does not divide the key length {skv}")
    if scale is None:
        scale = d ** -0.5
    n = skv // block_k
    # GQA: query head h reads kv head h // group. Repeating k and v costs O(Skv · D), not O(Sq · Skv).
    k = jnp.repeat(k, h // hkv, axis=1)
    v = jnp.repeat(v, h // hkv, axis=1)
    # (n, B, H, block_k, D): the scan walks the leading axis, one key block per step.
    k_blocks = k.reshape(b, h, n, block_k, d).transpose(2, 0, 1, 3, 4)
    v_blocks = v.reshape(b, h, n, block_k, d).transpose(2, 0, 1, 3, 4)
    q_pos = jnp.arange(sq)[:, None]

    def step(carry, block):
        m, l, acc = carry
        j, k_j, v_j = block
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k_j, preferred_element_type=jnp.float32) * scale
        if causal:
            k_pos = j * block_k + jnp.arange(block_k)[None, :]
            s = jnp.where(q_pos >= k_pos, s, -jnp.inf)
        m_new = jnp.maximum(m, jnp.max(s, axis=-1))
        alpha = jnp.exp(m - m_new)
        p = jnp.exp(s - m_new[..., None])
        l = alpha * l + jnp.sum(p, axis=-1)
        acc = alpha[..., None] * acc + jnp.einsum("bhqk,bhkd->bhqd", p.astype(v.dtype), v_j,
                                                  preferred_element_type=jnp.float32)
        carry = (m_new, l, acc)
        return carry, (carry if keep_states else None)

    init = (jnp.full((b, h, sq), -jnp.inf, jnp.float32), jnp.zeros((b, h, sq), jnp.float32),
            jnp.zeros((b, h, sq, d), jnp.float32))
    return lax.scan(step, init, (jnp.arange(n), k_blocks, v_blocks))
