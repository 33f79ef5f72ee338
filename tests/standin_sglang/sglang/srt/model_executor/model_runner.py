"""Test double of SGLang's ModelRunner (0.5.9+ return shape: an object with can_run_graph)."""

import time


class ModelRunnerOutput:
    def __init__(self, logits_output, can_run_graph):
        self.logits_output, self.can_run_graph = logits_output, can_run_graph


class ModelRunner:
    def __init__(self, tp_rank, cost_ms, graph):
        self.tp_rank, self.cost_ms, self.graph = tp_rank, cost_ms, graph
        self.is_draft_worker = False

    def forward(self, forward_batch, skip_attn_backend_init=False, pp_proxy_tensors=None):
        end = time.perf_counter() + self.cost_ms / 1000
        while time.perf_counter() < end:  # real work on the CPU, not a sleep
            pass
        return ModelRunnerOutput(None, self.graph)
