"""Numeric tolerances derived from the computation, not from what one machine printed.

Machines differ in their BLAS kernels, vector widths and summation orders (an AMD EPYC and an Intel Xeon gave
different last bits for the same fp32 run), so a test that compares two computations may only assert a bound
that holds for *any* order of the same floating-point operations:

* Two orders of a sum of ``n`` terms differ by at most ``2 * n * u * sum(|terms|)`` (Higham, *Accuracy and
  Stability of Numerical Algorithms*, 2nd ed., eq. 4.4: ``|error| <= gamma_(n-1) * sum |x_i|`` for each order),
  with ``u`` the unit roundoff: 2**-24 in float32, 2**-53 in float64.
* Adam turns a gradient element that sits at the rounding floor into a full step of either sign: its update
  ``lr * m_hat / (sqrt(v_hat) + eps)`` has a magnitude of up to ``lr * (1 - beta1) / sqrt(1 - beta2)`` whatever
  the gradient's size (Kingma & Ba, 2015, section 2.1). So float32 weights trained by Adam along two summation
  orders can differ by up to ``adam_drift(lr, steps)`` in an element, and no tighter bound holds on every
  machine. Tests that must pin trained weights tightly therefore train in float64 (``dtype: float64``), where
  the rounding floor is 2**29 times lower, and assert ``FLOAT64_WEIGHT_TOL``.
"""

from __future__ import annotations

import math

FP32_U = 2.0**-24
FP64_U = 2.0**-53

# Trained weights of two float64 runs that differ only in reduction order: each gradient element is a sum of at
# most ~1e5 products in these tiny models, so its relative error is <= 2 * 1e5 * 2**-53 ~ 2e-11; through Adam's
# normalisation that moves a step of size ~lr by the same relative amount, i.e. ~lr * 2e-11 per step, so ~1e-12 for
# the steps and learning rates of the tests. 1e-9 leaves three orders of magnitude for gradients that nearly cancel,
# and is still seven orders below the effect these tests guard (a sample in the wrong step, a lost or doubled
# gradient moves weights by ~lr = 1e-3 .. 1e-2). Measured: 2.3e-14 (window regrouping, 3 steps, lr 1e-2).
FLOAT64_WEIGHT_TOL = 1e-9


def sum_order_bound(n_terms: int, magnitude: float, u: float = FP32_U) -> float:
    """Largest difference between two summation orders of ``n_terms`` terms whose absolute values add up to
    ``magnitude`` (Higham eq. 4.4, once per order)."""
    return 2.0 * n_terms * u * magnitude


def adam_drift(lr: float, steps: int, beta1: float = 0.9, beta2: float = 0.999) -> float:
    """Largest per-element distance between two Adam(W) runs of ``steps`` steps at peak ``lr`` that start from the same
    weights: each run moves an element by at most ``lr * max(1, (1 - beta1) / sqrt(1 - beta2))`` per step (Kingma & Ba
    2015, section 2.1; the ``1`` covers the case ``(1 - beta1) <= sqrt(1 - beta2)``), so they are at most twice the
    sum apart. Weight decay at these learning rates adds < lr * wd * |w| per step, far below this."""
    return 2.0 * steps * lr * max(1.0, (1.0 - beta1) / math.sqrt(1.0 - beta2))


def loss_tolerance(n_tokens: int, loss: float, u: float = FP32_U) -> float:
    """Two orders of a mean cross-entropy over ``n_tokens`` tokens of about ``loss`` nats each."""
    return sum_order_bound(n_tokens, n_tokens * abs(loss), u) / n_tokens
