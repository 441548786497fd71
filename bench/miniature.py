"""``python -m bench.miniature``: is the local run's target in the large-model regime?

On trn2 a large target's decode step is bound by reading its weights: verifying k+1 drafted
tokens costs about one step, and a draft step is a small fraction of a target step. This
measures the same three ratios for the local run's generated models (the ones
``python -m local_run`` serves, from ``config.local``), with plain PyTorch on one thread,
as vLLM's CPU engine runs on one core:

- target step, 1 token, with a KV cache of ``--context`` tokens (bytes of weights per step
  from the model, so the implied read bandwidth too);
- target verify step of k+1 tokens (k = the local run's ``num_speculative_tokens``), as a
  ratio to the 1-token step (k+1 single steps would be k+1 times);
- draft step, 1 token, as a fraction of the target's;
- the trained, unpadded target's 1-token step, to show what the padding adds.

Method: each measurement is the median of ``--repeats`` timed forward passes after warm-up,
taken in interleaved rounds (every round times every case once) so a load spike from other
processes on this shared machine hits all cases alike; the load average is recorded before
and after. Writes JSON to stdout (or ``--out``).

    python -m bench.miniature
    python -m bench.miniature -c experiment.local.generator.draft=large --out mini.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from experiment.loading import build_config, cdk_json_context, context_from_pairs
from local_run.models import TRAINED_TARGET, ModelPair, ensure_models

FLOAT32_BYTES = 4


def _load(path: Path) -> Any:
    from transformers import Qwen3ForCausalLM

    return Qwen3ForCausalLM.from_pretrained(path, torch_dtype="float32").eval()


def _step(model: Any, context: int, tokens: int) -> Callable[[], None]:
    """One forward pass of ``tokens`` new tokens after a cached context of ``context``."""
    import torch
    from transformers import DynamicCache

    vocab = model.config.vocab_size
    generator = torch.Generator().manual_seed(0)
    prefix = torch.randint(0, vocab, (1, context), generator=generator)
    new = torch.randint(0, vocab, (1, tokens), generator=generator)
    cache = DynamicCache()
    with torch.no_grad():
        model(input_ids=prefix, past_key_values=cache, use_cache=True)

    def run() -> None:
        with torch.no_grad():
            model(input_ids=new, past_key_values=cache, use_cache=True)
        cache.crop(context)  # the next pass sees the same context length

    return run


def _weight_bytes(model: Any) -> int:
    return sum(p.numel() for p in model.parameters()) * FLOAT32_BYTES


def measure(pair: ModelPair, k: int, context: int, repeats: int, threads: int) -> dict[str, Any]:
    import torch

    torch.set_num_threads(threads)
    target, draft = _load(pair.target_dir), _load(pair.draft_dir)
    trained = _load(pair.root / TRAINED_TARGET)
    cases = {
        "target_step_1": _step(target, context, 1),
        f"target_verify_{k + 1}": _step(target, context, k + 1),
        "draft_step_1": _step(draft, context, 1),
        "trained_target_step_1": _step(trained, context, 1),
    }
    for run in cases.values():  # warm-up: allocator, caches
        for _ in range(3):
            run()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    load_before = os.getloadavg()
    for _ in range(repeats):
        for name, run in cases.items():
            started = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - started) * 1e3)
    load_after = os.getloadavg()
    median = {name: statistics.median(values) for name, values in samples.items()}
    step = median["target_step_1"]
    target_bytes = _weight_bytes(target)
    return {
        "method": (
            f"median of {repeats} interleaved forward passes per case (PyTorch, {threads} "
            f"thread(s), float32, KV cache of {context} tokens), after 3 warm-up passes"
        ),
        "models": str(pair.root),
        "draft": pair.draft_path,
        "k": k,
        "weight_bytes_per_step": {
            "target": target_bytes,
            "draft": _weight_bytes(draft),
            "trained_target": _weight_bytes(trained),
        },
        "median_ms": {name: round(value, 3) for name, value in median.items()},
        "p90_ms": {
            name: round(statistics.quantiles(values, n=10)[-1], 3)
            for name, values in samples.items()
        },
        "ratios": {
            f"verify_{k + 1}_over_step_1": round(median[f"target_verify_{k + 1}"] / step, 2),
            "draft_step_over_target_step": round(median["draft_step_1"] / step, 3),
            "target_step_over_trained_target_step": round(
                step / median["trained_target_step_1"], 1
            ),
        },
        "implied_read_gb_per_s": round(target_bytes / (step / 1e3) / 1e9, 1),
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "cpus": os.cpu_count(),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.miniature", description=__doc__)
    parser.add_argument("-c", "--context-override", action="append", default=[], metavar="K=V")
    parser.add_argument("--config", help="a YAML/JSON experiment config file")
    parser.add_argument("--context", type=int, default=256, help="cached tokens before a step")
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="vLLM's CPU engine uses one core")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    context = {**cdk_json_context(), **context_from_pairs(args.context_override)}
    config = build_config(context, config_file=args.config)
    local = config.local
    k = local.num_speculative_tokens or config.serving.num_speculative_tokens
    if args.context + k + 1 > local.max_model_len:
        parser.error(f"--context {args.context} + k + 1 exceeds local.max_model_len")
    pair = ensure_models(local, log=lambda line: print(line, file=sys.stderr))
    result = measure(pair, k, args.context, args.repeats, args.threads)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
