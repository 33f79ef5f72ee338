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
        if self.graph:
            # A graph replay leaves the CPU idle while the GPU runs it: a sleep, which a loaded
            # CPU does not stretch (beyond waking up). A busy wait here read 2 ms verify as 6 ms
            # whenever a 4 ms time slice of the suite's other workers preempted it, and one
            # launch method read slower than the other on a loaded machine (fresh-clone CI).
            time.sleep(self.cost_ms / 1000)
            return ModelRunnerOutput(None, self.graph)
        # Eager: the CPU launches every kernel, so its time is real work on the CPU, counted
        # in this thread's CPU time: on a loaded machine every eager forward stretches alike.
        # In wall time a preemption costs a 1 ms decode forward more than a 6 ms verify one
        # (whose busy wait absorbs it): one run of the suite on six workers over 2 cores
        # measured speculation faster than none at the bad end.
        end = time.thread_time() + self.cost_ms / 1000
        while time.thread_time() < end:
            pass
        return ModelRunnerOutput(None, self.graph)
