"""``local.eagle3``: the EAGLE3 head the local run can serve instead of a draft model."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from experiment.config.base import Section


class Eagle3HeadConfig(Section):
    """A one-layer EAGLE3 head for the generated target (``local_run/eagle3.py``), trained
    on the target's own hidden states and greedy outputs; the miniature of the EAGLE3
    drafter the plugin profile serves on trn2 (RedHatAI/Qwen3-32B-speculator.eagle3)."""

    intermediate_size: Annotated[int, Field(ge=32)] = Field(
        default=384, description="MLP width of the head's one layer; 32 or more."
    )
    prompts: Annotated[int, Field(ge=1)] = Field(
        default=256,
        description=(
            "Structured chat prompts whose target continuations (and the target's hidden "
            "states on them) the head learns; 1 or more."
        ),
    )
    new_tokens: Annotated[int, Field(ge=1)] = Field(
        default=128, description="Tokens of each target continuation; 1 or more."
    )
    train_steps: Annotated[int, Field(ge=1)] = Field(
        default=200, description="Training steps of the head; 1 or more."
    )
    # Rows of its own (the drafts' generator.batch_size is part of the target's key): the
    # head's step cost is rows x positions x (its layer and lm_head), unrolled ttt_steps times.
    batch_size: Annotated[int, Field(ge=1)] = Field(
        default=8, description="Rows per training batch of the head; 1 or more."
    )
    # EAGLE-3's training-time test: the head also learns from its own earlier hidden
    # states, as vLLM feeds them back for draft positions 2..k.
    ttt_steps: Annotated[int, Field(ge=1, le=15)] = Field(
        default=3,
        description=(
            "Draft positions trained unrolled (training-time test), the head feeding its "
            "own hidden state forward as vLLM does; 1-15."
        ),
    )
    learning_rate: Annotated[float, Field(gt=0, le=0.1)] = Field(
        default=3e-3, description="Learning rate of the head's training; above 0, at most 0.1."
    )
