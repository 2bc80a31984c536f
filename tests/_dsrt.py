"""One rank of DeepSpeed's real pipeline engine over gloo on the CPU, running the instruction
stream it is given (``python tests/_dsrt.py``, with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and SV_STEPS, a JSON list per stage of steps of [name, buffer id]): a tiny
``PipelineModule`` of 2 stages, ``gradient_accumulation_steps`` = the microbatches, and
``PipelineEngine._train_schedule`` swapped for a ``TrainSchedule`` subclass whose ``steps()``
yields that stream.  With SV_DUALPIPEV=1, a ``DualPipeVModule`` (two stages per rank, so
DeepSpeed runs its ``DualPipeVEngine``) and a ``DualPipeVSchedule`` subclass, each step's
instructions [name, buffer id, phase].  Prints ``DONE <loss>`` when ``train_batch`` returns.
"""

from __future__ import annotations

import json
import os
import sys


def main() -> int:
    os.environ.setdefault("DS_ACCELERATOR", "cpu")
    import torch
    import deepspeed
    from deepspeed.pipe import DualPipeVModule, PipelineModule
    from deepspeed.runtime.pipe import schedule as ds_schedule

    steps = json.loads(os.environ["SV_STEPS"])
    stages = len(steps)
    micro = int(os.environ["SV_MICROBATCHES"])
    dualpipev = os.environ.get("SV_DUALPIPEV") == "1"
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    layers = [torch.nn.Linear(4, 4) for _ in range(2 * stages if dualpipev else stages)]
    module = (DualPipeVModule if dualpipev else PipelineModule)(
        layers=layers, num_stages=stages, loss_fn=torch.nn.MSELoss(), partition_method="uniform")
    config = {"train_batch_size": micro, "train_micro_batch_size_per_gpu": 1,
              "gradient_accumulation_steps": micro, "steps_per_print": 10 ** 9,
              "optimizer": {"type": "SGD", "params": {"lr": 0.01}}, "zero_optimization": {"stage": 0}}
    engine, _, _, _ = deepspeed.initialize(model=module, model_parameters=module.parameters(), config=config)

    def instruction(name, b=None, phase=None):
        kwargs = {k: v for k, v in (("buffer_id", b), ("phase", phase)) if v is not None}
        return getattr(ds_schedule, name)(**kwargs)

    class Given(ds_schedule.DualPipeVSchedule if dualpipev else ds_schedule.TrainSchedule):
        def steps(self):
            for row in steps[self.stage_id]:
                yield [instruction(*cmd) for cmd in row]

    engine._train_schedule = lambda: Given(micro_batches=engine.micro_batches, stages=engine.num_stages,
                                           stage_id=engine.stage_id)
    data = iter([(torch.ones(1, 4), torch.zeros(1, 4))] * micro)
    loss = engine.train_batch(data_iter=data)
    print("DONE", float(loss), flush=True)
    return 0


if __name__ == "__main__":
    code = main()
    # The run's outcome is printed: leave without the interpreter's teardown, where a C++
    # thread of the communication backends still joinable at exit now and then aborts the
    # process ("terminate called without an active exception", SIGABRT) after DONE
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
