"""The program the site's x-ray shows: one dense layer, a bias, a tanh and a softmax."""

import jax
import jax.numpy as jnp


def layer(x, w, b):
    h = jnp.dot(x, w)
    a = jnp.tanh(h + b)
    return jax.nn.softmax(a, axis=-1)
