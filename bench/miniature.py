"""``python -m bench.miniature``: is the local run's target in the large-model regime?

On trn2 a large target's decode step is bound by reading its weights: verifying k+1 drafted
tokens costs about one step, and a draft step is a small fraction of a target step. This
measures the same three ratios for the local run's generated models (the ones
``python -m local_run`` serves, from ``config.local``), with plain PyTorch on one thread,
as vLLM's CPU engine runs on one core:

- target step, 1 token, with a KV cache of ``--context-tokens`` tokens (bytes of weights per step
  from the model, so the implied read bandwidth too);
- target verify step of k+1 tokens (k = the local run's ``num_speculative_tokens``), as a
  ratio to the 1-token step (k+1 single steps would be k+1 times);
- draft step, 1 token, as a fraction of the target's;
- the trained, unpadded target's 1-token step, to show what the padding adds;
- the acceptance rate per prompt class that draft-model speculation at temperature 0 would
  have on the local run's own prompts (``speculative_acceptance``): the target's greedy
  answers (``local.max_tokens``) replayed with the draft's teacher-forced greedy guesses.
  Greedy verification accepts exactly the leading run of agreements, so this is the rate
  vLLM counts, up to float differences between PyTorch and vLLM's kernels; it compares
  drafts in seconds instead of a full run.

Method: each measurement is the median of ``--repeats`` timed forward passes after warm-up,
taken in interleaved rounds (every round times every case once) so a load spike from other
processes on this shared machine hits all cases alike; the load average is recorded before
and after. Writes JSON to stdout (or ``--out``).

    python -m bench.miniature
    python -m bench.miniature -c experiment.local.generator.draft=large --out mini.json
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from experiment.config import ExperimentConfig
from experiment.loading import ConfigError, config_from_arguments, config_parser
from loadtest.analysis import served_k
from loadtest.prompts import load_prompts
from local_run.arms import local_experiment
from local_run.machine import Machine
from local_run.models import TRAINED_TARGET, ModelPair, ensure_models, greedy_continuations

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
    host = Machine.at_start()
    for _ in range(repeats):
        for name, run in cases.items():
            started = time.perf_counter()
            run()
            samples[name].append((time.perf_counter() - started) * 1e3)
    host.finish()
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
        "load_average_before": host.load_average_start,
        "load_average_after": host.load_average_end,
        "cpu": host.cpu,
        "cpus": host.cores,
    }


def speculative_acceptance(agree: Sequence[bool], first: int, k: int) -> tuple[int, int]:
    """(accepted, proposed) draft tokens of greedy draft-model speculation over one sequence.

    ``agree[i]``: the draft's greedy next token after position ``i`` equals the target's.
    Decoding starts after position ``first`` (the last prompt token) and ends at the last
    position; each step proposes ``k`` tokens, the target accepts the leading run of
    agreements and adds one token of its own (so a step advances accepted + 1 positions).
    """
    accepted = proposed = 0
    position, end = first, len(agree)
    while position < end:
        run = 0
        while run < k and position + run < end and agree[position + run]:
            run += 1
        accepted += run
        proposed += k
        position += run + 1
    return accepted, proposed


def acceptance_by_class(config: ExperimentConfig, pair: ModelPair, k: int) -> dict[str, float]:
    """Replayed acceptance rate per prompt class on the local run's prompts (see above)."""
    import torch
    from transformers import AutoTokenizer

    local = config.local
    tokenizer = AutoTokenizer.from_pretrained(pair.target_dir)
    # The trained target computes the served (padded) target's function, at 1/12 the cost.
    target, draft = _load(pair.root / TRAINED_TARGET), _load(pair.draft_dir)
    by_class: dict[str, list[str]] = {}
    for prompt in load_prompts(local_experiment(config).loadtest.prompts.files):
        text = tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt.text}], add_generation_prompt=True, tokenize=False
        )
        by_class.setdefault(prompt.prompt_class, []).append(str(text))
    rates = {}
    with torch.no_grad():
        for prompt_class, texts in sorted(by_class.items()):
            sequences = greedy_continuations(target, tokenizer, texts, local.max_tokens)
            accepted = proposed = 0
            for text, sequence in zip(texts, sequences, strict=True):
                ids = torch.tensor([sequence])
                agree = target(input_ids=ids).logits[0].argmax(-1) == (
                    draft(input_ids=ids).logits[0].argmax(-1)
                )
                prompt_tokens = len(tokenizer(text, add_special_tokens=False)["input_ids"])
                # The last position predicts past the answer: not part of the replay.
                a, p = speculative_acceptance(agree[:-1].tolist(), prompt_tokens - 1, k)
                accepted, proposed = accepted + a, proposed + p
            rates[prompt_class] = round(accepted / proposed, 3)
    return rates


def main(argv: list[str] | None = None) -> int:
    parser = config_parser("python -m bench.miniature", __doc__)  # --config, -c as everywhere
    parser.add_argument(
        "--context-tokens", type=int, default=256, help="cached tokens before a step"
    )
    parser.add_argument("--repeats", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="vLLM's CPU engine uses one core")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    try:
        config = config_from_arguments(args)
    except ConfigError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    local = config.local
    k = served_k(config, local=True)
    if args.context_tokens + k + 1 > local.max_model_len:
        parser.error(f"--context-tokens {args.context_tokens} + k + 1 exceeds local.max_model_len")
    pair = ensure_models(local, log=lambda line: print(line, file=sys.stderr))
    result = measure(pair, k, args.context_tokens, args.repeats, args.threads)
    result["replayed_acceptance_by_class"] = acceptance_by_class(config, pair, k)
    text = json.dumps(result, indent=1)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
