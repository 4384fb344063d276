"""Progress display for the command line: a tqdm bar with loss and tokens/s."""

from __future__ import annotations

from tqdm import tqdm  # the library proper never imports this module: only the CLI does

from .records import Callbacks, Sample, StepMetrics, TargetReached


class ProgressCallbacks(Callbacks):
    def __init__(self, total_steps: int, bar: bool = True) -> None:
        self.total = total_steps
        self.use_bar = bar
        self.bar: tqdm | None = None
        self.target: float | None = None
        self.rows: list[StepMetrics] = []  # the evaluations, for the time to target

    def on_start(self, info: dict) -> None:
        self.target = info.get("target_val_loss")
        d = info["device_info"]
        print(f"{info['params']:,} parameters on {info['device']} ({d.get('name')}), {info['precision']}; "
              f"{info['train_tokens']:,} train / {info['val_tokens']:,} val tokens"
              + (f"; resuming at step {info['start_step']}" if info["resumed"] else ""))
        if self.use_bar:
            self.bar = tqdm(total=self.total, initial=info["start_step"], unit="step", dynamic_ncols=True)

    def on_step(self, m: StepMetrics) -> None:
        if self.bar is not None:
            self.bar.update(m.step - self.bar.n)
            self.bar.set_postfix(loss=f"{m.train_loss:.3f}", tok_s=f"{m.tokens_per_sec:,.0f}")

    def on_eval(self, m: StepMetrics) -> None:
        full = "" if m.val_loss_full is None else f" (whole split {m.val_loss_full:.4f})"
        self._write(f"step {m.step:>6}: train {m.train_loss:.4f}  val {m.val_loss:.4f}{full}  "
                    f"{m.tokens_per_sec:,.0f} tok/s  {m.peak_mem_mib:,.0f} MiB")
        reached_before = TargetReached.first(self.rows, self.target)
        self.rows.append(m)
        reached = TargetReached.first(self.rows, self.target)
        if reached and not reached_before:
            self._write(reached.line())

    def on_sample(self, s: Sample) -> None:
        self._write(f"sample @ {s.step}: {s.text!r}")

    def _write(self, line: str) -> None:
        if self.bar is not None:
            self.bar.write(line)
        else:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


class SweepProgress:
    """``on_cell`` for :func:`tinygpt.bench.sweep`: a bar over the cells, with the last result."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.bar: tqdm | None = None

    def __call__(self, index: int, total: int, cell: object) -> None:
        if not self.enabled:
            return
        if self.bar is None:
            self.bar = tqdm(total=total, unit="cell", desc="bench", dynamic_ncols=True)
        self.bar.update(1)
        tps = getattr(cell, "tokens_per_sec", None)
        self.bar.set_postfix(last=f"{getattr(cell, 'precision', '')} b{getattr(cell, 'batch_size', '')}: "
                             + ("OOM" if tps is None else f"{tps:,.0f} tok/s"))

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
