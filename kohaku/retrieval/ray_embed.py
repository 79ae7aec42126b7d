"""Embedding on a Ray cluster (``run.executor=ray``): chunks of texts through Ray Data's
``map_batches`` to a pool of actors, each loading the encoder once.

:class:`RayEncoder` is an :class:`kohaku.retrieval.embedding.Encoder` whose ``encode_chunks``
(called by :func:`kohaku.retrieval.embedding.encode_texts`) sends every chunk not in the encoding
cache as one Ray Data row and yields each chunk's vectors as it comes back, so the driver writes
the encoding cache chunk by chunk as locally. A chunk is encoded by the same code as locally
(``load_encoder`` in the actor), so the vectors are the local ones. An actor whose process dies
is restarted and only the batch it held is encoded again (Ray's actor task retries). Ray is
imported only here, inside the functions.
"""

from __future__ import annotations

import logging
from typing import Any, Iterator, Sequence

import numpy as np

from kohaku.retrieval.embedding import load_encoder

log = logging.getLogger("kohaku.embed")


def _describe(values: dict[str, Any]) -> dict[str, Any]:
    """In a Ray task: what the driver needs of the encoder without loading it (dim, ids)."""
    encoder = load_encoder(values)
    out = {"dim": int(encoder.dim), "model_id": getattr(encoder, "model_id", "")}
    if hasattr(encoder, "role_id"):
        out["role_ids"] = {role: encoder.role_id(role) for role in ("document", "query")}
    return out


class _EncodeActor:
    """A Ray Data actor: the encoder loaded once; each batch row is (chunk number, texts)."""

    def __init__(self, values: dict[str, Any], role: str) -> None:
        encoder = load_encoder(values)
        self.encode = encoder.encode_queries if role == "query" else encoder.encode_documents

    def __call__(self, batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        chunks, positions, vectors = [], [], []
        for k, texts in zip(batch["chunk"], batch["texts"]):
            vecs = np.asarray(self.encode([str(t) for t in texts]), dtype=np.float32)
            chunks.extend([int(k)] * len(vecs))
            positions.extend(range(len(vecs)))
            vectors.append(vecs)
        return {"chunk": np.asarray(chunks, np.int64), "pos": np.asarray(positions, np.int64),
                "vector": np.concatenate(vectors) if vectors else np.zeros((0, 0), np.float32)}


class RayEncoder:
    """An encoder run by Ray Data actors of ``session`` (kohaku.core.executors.RaySession);
    ``values`` is the ``embed`` group as plain values."""

    def __init__(self, session: Any, values: dict[str, Any]) -> None:
        import ray

        self.session = session
        self.values = dict(values)
        probe = ray.remote(_describe).options(num_cpus=float(session.cfg.ray_num_cpus),
                                              max_retries=int(session.cfg.ray_max_retries))
        info = ray.get(probe.remote(self.values))
        self.dim: int = info["dim"]
        self.model_id: str = info["model_id"]
        self._role_ids: dict[str, str] | None = info.get("role_ids")

    def role_id(self, role: str) -> str:
        if self._role_ids is None:   # an encoder without role ids: encoding_cache's own fallback
            return f"{self.model_id}|{role}"
        return self._role_ids[role]

    @property
    def actors(self) -> int:
        cfg = self.session.cfg
        return int(cfg.ray_actors) if cfg.ray_actors else self.session.slots

    def encode_chunks(self, role: str, chunks: Sequence[Sequence[str]]) -> Iterator[tuple[int, np.ndarray]]:
        """(chunk number, its (n, dim) vectors) for every chunk, in the order they are done."""
        import ray

        if not chunks:
            return
        cfg = self.session.cfg
        logging.getLogger("ray.data").setLevel(logging.WARNING)   # our tqdm bar shows the progress
        ds = ray.data.from_items([{"chunk": k, "texts": list(c)} for k, c in enumerate(chunks)],
                                 override_num_blocks=len(chunks))
        out = ds.map_batches(
            _EncodeActor, fn_constructor_args=(self.values, role), batch_size=1, batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=min(self.actors, len(chunks))),
            num_cpus=float(cfg.ray_num_cpus),
            # a lost actor is restarted and its batch rerun (only that batch)
            max_restarts=-1, max_task_retries=int(cfg.ray_max_retries),
        )
        got: dict[int, list[tuple[int, np.ndarray]]] = {}
        for batch in out.iter_batches(batch_size=None, batch_format="numpy"):
            for k, pos, vec in zip(batch["chunk"], batch["pos"], batch["vector"]):
                rows = got.setdefault(int(k), [])
                rows.append((int(pos), vec))
                if len(rows) == len(chunks[int(k)]):
                    rows.sort(key=lambda r: r[0])
                    yield int(k), np.stack([v for _, v in rows]).astype(np.float32, copy=False)
                    del got[int(k)]
        if got:
            raise RuntimeError(f"Ray Data returned {len(got)} chunk(s) incomplete: {sorted(got)[:5]}")

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode_one("document", texts)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode_one("query", texts)

    def _encode_one(self, role: str, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return next(iter(self.encode_chunks(role, [list(texts)])))[1]
