"""Progress of one generate call of the hf backend: the bar, the time left, the prefill/decode
split and the decode's memory traffic (what ``scripts/bench_llm.py`` compares with the limit)."""

from __future__ import annotations

import logging
import time

from kohaku.llm.hf.sampler import Row

log = logging.getLogger(__name__)

# keys of Progress.timings(), summed over calls by HFBackend.timings
TIMING_KEYS = ("prefill_seconds", "decode_seconds", "prefill_tokens", "decode_steps",
               "decoded_tokens", "kv_positions", "decode_rows")


class Progress:
    """Progress of one generate call (one infer round): a bar of prompts done / total with
    prompt and output tokens/s and an estimate of the time left, and the prefill/decode split.

    A prompt is done when all its rows (samples) have finished. The time left is the prompt
    tokens still to prefill at the prefill rate so far plus the tokens still to decode at the
    decode rate so far. A row not started yet is expected to write as many tokens as the
    finished rows did on average; a row decoding now that has written ``w`` tokens, as many
    more as the finished rows that went past ``w`` wrote after it (half of what its
    ``max_tokens`` leaves when none did). Before the first decode step the estimate covers the
    prefill only and shows as a lower bound (``eta >12s``).

    Besides seconds and tokens it counts, per decode step, the rows in the step
    (``decode_rows``) and the kv-cache positions their attention read (``kv_positions``).
    """

    def __init__(self, name: str, rows: list[Row], show: bool = True):
        self.name = name
        self.left: dict[int, int] = {}      # request -> rows not finished yet
        prompts: dict[int, int] = {}
        for r in rows:
            self.left[r.req] = self.left.get(r.req, 0) + 1
            prompts[r.req] = len(r.ids)
        self.prompt_total = sum(prompts.values())   # each distinct prompt is prefilled once
        self.max_tokens = {id(r): r.max_tokens for r in rows}
        self.rows_total = len(rows)
        self.n_prompts = len(prompts)
        self.done_rows: set[int] = set()
        self.finished_tokens = 0            # tokens written by finished rows
        self.finished_lengths: list[int] = []
        self.decoded = 0                    # tokens written so far, finished rows or not
        self.live = 0                       # rows decoding now, not finished
        self.prefill_s = self.decode_s = 0.0
        self.prefill_tok = self.steps = 0
        self.kv_positions = self.decode_rows = 0
        self.t_start = time.perf_counter()
        self._shown = 0.0
        self.bar = None
        if show:
            from tqdm.auto import tqdm

            self.bar = tqdm(total=self.n_prompts, desc=f"{name} generate", unit="prompt",
                            bar_format="{desc}: {n_fmt}/{total_fmt} prompts [{elapsed}{postfix}]")

    @classmethod
    def silent(cls, rows: list[Row]) -> "Progress":
        return cls("", rows, show=False)

    def prefilled(self, tokens: int, seconds: float) -> None:
        self.prefill_tok += tokens
        self.prefill_s += seconds
        self._show()

    def decoding(self, n_rows: int) -> None:
        """``n_rows`` rows are decoding now."""
        self.live = n_rows

    def stepped(self, seconds: float, tokens: int, steps: int = 1, kv_positions: int = 0) -> None:
        """``steps`` decode steps took ``seconds`` and wrote ``tokens`` tokens (one per row in
        the step) while reading ``kv_positions`` cached positions."""
        self.decode_s += seconds
        self.steps += steps
        self.decoded += tokens
        self.decode_rows += tokens
        self.kv_positions += kv_positions
        self._show()

    def row_done(self, row: Row, generated: int) -> None:
        if id(row) in self.done_rows:
            return
        self.done_rows.add(id(row))
        self.finished_tokens += generated
        self.finished_lengths.append(generated)
        self.live = max(self.live - 1, 0)
        self.left[row.req] -= 1
        if self.left[row.req] == 0 and self.bar is not None:
            self.bar.update(1)

    def eta(self) -> float | None:
        """Seconds left (None before any rate is known)."""
        if not self.prefill_tok:
            return None
        budget = sum(self.max_tokens.values()) / max(len(self.max_tokens), 1)
        done = self.finished_lengths
        per_row = sum(done) / len(done) if done else budget
        later = self.rows_total - len(self.done_rows) - self.live
        tokens = later * per_row
        if self.live:
            w = (self.decoded - self.finished_tokens) / self.live   # written per live row
            past = [n - w for n in done if n > w]
            tokens += self.live * (sum(past) / len(past) if past else max(budget - w, 0) / 2)
        left = max(self.prompt_total - self.prefill_tok, 0) * self.prefill_s / self.prefill_tok
        if self.decoded and self.decode_s:
            left += tokens * self.decode_s / self.decoded
        return left

    def _show(self, force: bool = False) -> None:
        if self.bar is None:
            return
        now = time.perf_counter()
        if not force and now - self._shown < 1.0:
            return
        self._shown = now
        parts = []
        if self.prefill_s:
            parts.append(f"prefill {self.prefill_tok}/{self.prompt_total} tok "
                         f"{self.prefill_tok / self.prefill_s:.0f} tok/s")
        if self.decode_s:
            parts.append(f"decode {self.steps} steps {self.decoded / self.decode_s:.1f} tok/s")
        eta = self.eta()
        if eta is not None:   # before any decode step the decode time is unknown: a lower bound
            parts.append(f"eta {'' if self.decoded else '>'}{eta:.0f}s")
        self.bar.set_postfix_str(", ".join(parts))

    def timings(self) -> dict[str, float]:
        return {"prefill_seconds": self.prefill_s, "decode_seconds": self.decode_s,
                "prefill_tokens": self.prefill_tok, "decode_steps": self.steps,
                "decoded_tokens": self.decoded, "kv_positions": self.kv_positions,
                "decode_rows": self.decode_rows}

    def close(self) -> None:
        if self.bar is not None:
            self._show(force=True)
            self.bar.close()
        log.info("%s: %d prompt(s), %d row(s) in %.1f s: prefill %d tokens in %.1f s (%.0f tok/s), "
                 "decode %d tokens in %d steps in %.1f s (%.1f tok/s)", self.name, self.n_prompts,
                 self.rows_total, time.perf_counter() - self.t_start, self.prefill_tok,
                 self.prefill_s, self.prefill_tok / max(self.prefill_s, 1e-9), self.decoded,
                 self.steps, self.decode_s, self.decoded / max(self.decode_s, 1e-9))
