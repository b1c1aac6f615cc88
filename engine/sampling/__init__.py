"""Sampling layer, pure: keyed Gumbel noise and the Gumbel-max sampler. Nothing here touches the
database, a model or the file system.

Benz et al., "Evaluation of Large Language Models via Coupled Token Generation", Section 3 (the
Gumbel-Max SCM): every model draws token t at step s with the same noise g(seed, prompt, repeat, s, t).

* :mod:`.noise`        -- the reference: ``gumbel`` (a (B, V) block), ``gumbel_at`` (chosen cells)
* :mod:`.gumbel`       -- the sampler: token = argmax(z + g), z = float32(logits) / T, masks for
  top-k / top-p that never move noise between tokens
* :mod:`.keyed`        -- ``draw``, the one sampling entry point of both backends (picks the kernel)
* :mod:`.triton_noise` -- the Triton kernels (CUDA): fused noise, fused Gumbel-argmax, single-read
* :mod:`.kernel_check` -- a compiled kernel is checked against the torch formula before first use
* :mod:`.cpu_argmax`   -- the exact numba Gumbel-argmax on CPU; kernels in :mod:`._cpu_argmax_kernels`
"""
