"""The hf backend (transformers, CPU or GPU), along its seams:

- ``backend``: config, loading (GGUF -> verified Hugging Face folder), rendering, the JSON
  grammar, the generate call;
- ``decode``: continuous batching over a slot kv cache, and the ``model.generate`` fallback;
- ``sampler``: per-row token choice (grammar, closing a JSON answer in time, seeded sampling);
- ``progress``: the progress bar, the time left and the prefill/decode timings.
"""

from kohaku.llm.hf.backend import DECODER_VERSION, HFBackend, HFConfig

__all__ = ["DECODER_VERSION", "HFBackend", "HFConfig"]
