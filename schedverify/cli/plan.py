"""``schedverify plan``: the fastest schedule that fits a real run, ranked against the rest,
and written as the CSV torchtitan runs.

Exit codes: 0 a schedule fits (and was written, with ``-o``), 1 none fits the memory limit
and runs on torchtitan, 2 usage or input error (sizes no schedule can have, such as more
devices than the model has layers, are one: the reason is named).
"""

from __future__ import annotations

import json

from ..errors import UsageError
from . import EXIT_INVALID, EXIT_OK
from .common import non_negative_float, positive_int, write_output


def _chunks(text: str) -> tuple[int, ...]:
    import argparse

    try:
        out = tuple(int(t) for t in text.split(",") if t.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected chunk counts like 2 or 2,4, got {text!r}") from None
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"chunk counts must be whole numbers >= 1, got {text!r}")
    return out


def register(sub) -> None:
    p = sub.add_parser(
        "plan", help="rank every schedule for a real run (seconds, bytes) and export the best for torchtitan",
        description="Evaluate every schedule family that fits the sizes, and the search engine's "
                    "best schedule, under a model's (or a measurement's) per-stage costs and a memory "
                    "limit in bytes; print them ranked by predicted step time, with peak memory per "
                    "device and why a schedule is refused; write the fastest that fits as the CSV "
                    "torchtitan runs (--parallelism.pipeline_parallel_schedule_csv), checked under "
                    "torch-nccl semantics first. Exit code: 0 a schedule fits, 1 none fits, 2 usage error "
                    "(including sizes no schedule can have).",
    )
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--model", metavar="FILE.toml",
                     help="a decoder-only transformer and its hardware (examples/llama3-8b.toml)")
    src.add_argument("--profile", metavar="FILE",
                     help="measured per-stage times and memory (JSON or CSV; see docs/howto/plan.md)")
    src.add_argument("--trace", metavar="FILE", nargs="+",
                     help="PyTorch profiler Chrome traces of one pipeline step (one per rank)")
    p.add_argument("--devices", type=positive_int, metavar="P",
                   help="pipeline-parallel degree (devices in one pipeline)")
    p.add_argument("--microbatches", type=positive_int, metavar="M",
                   help="microbatches per step (default: the model file's [training] microbatches)")
    p.add_argument("--memory-limit", metavar="L",
                   help="memory per device: bytes with a unit (80GiB, 75GB) or a share of the "
                        "device's memory (90%%); default: the device's memory when one is named")
    p.add_argument("--device", metavar="NAME",
                   help="the accelerator (H100-SXM, A100-80GB, ...), for --memory-limit N%% with a "
                        "measured profile; a model file names its own")
    p.add_argument("--chunks", type=_chunks, default=(2,), metavar="V[,V...]",
                   help="stages per device to try for the families that take them (default 2)")
    p.add_argument("--families", metavar="NAME[,NAME...]",
                   help="only these families (default: every family)")
    p.add_argument("--search-time", type=non_negative_float, default=10.0, metavar="S",
                   help="seconds for the search engine, per shape (loop, and v with 2 chunks); 0 skips it")
    p.add_argument("-o", "--output", metavar="FILE",
                   help="write the winner here: the .csv torchtitan runs, or with --framework megatron or "
                        "deepspeed the schedverify/1 .json of the framework's own order (schedverify check "
                        "re-checks it on that framework's loop)")
    p.add_argument("--framework", choices=("megatron", "deepspeed", "torchtitan"),
                   help="rank only what this framework can run, each checked on its own loop, and print what it "
                        "needs: megatron-core 0.19.2's 1F1B and interleaved 1F1B (V of --chunks) and Megatron-LM's "
                        "arguments; DeepSpeed 0.19.8's TrainSchedule and its PipelineModule and config; torchtitan "
                        "0.3.0's schedules (a CSV) and its options (docs/frameworks.md)")
    p.add_argument("--torch", metavar="RELEASE",
                   help="the PyTorch release whose runtime runs the plan (2.13, 2.14 or 2.15; default: the "
                        "installed torch's, else the newest modelled): its lowering, and what its pending "
                        "sends hold (docs/spec.md 9)")
    p.add_argument("--formulas", action="store_true",
                   help="with --model: print the model's per-layer formulas (FLOPs, activation and "
                        "parameter bytes, with their sources) as sympy expressions and their values, "
                        "instead of planning")
    m = p.add_argument_group("memory: what autograd keeps (docs/memory.md)")
    m.add_argument("--backend", choices=("cuda", "cpu", "paper"),
                   help="with --model: the activation formulas of PyTorch's autograd on cuda or cpu, or the "
                        "paper's count (Korthikanti et al. 2022); default: the model file's [training] backend, "
                        "else cuda")
    m.add_argument("--measure", nargs="?", const="auto", choices=("auto", "cpu", "cuda"), metavar="DEVICE",
                   help="with --model: run one layer, the head and the embedding of the model's own code "
                        "(torchtitan's when it imports, else a reference block) at small shapes on DEVICE "
                        "(cpu or cuda; default: cuda where there is one, else cpu), count what autograd keeps "
                        "and plan with it; needs PyTorch")
    m.add_argument("--measure-time", action="store_true",
                   help="with --measure: also time F, I, W of one layer and the head at the model's own sizes "
                        "on that device, and plan with those seconds")
    m.add_argument("--measure-code", choices=("torchtitan", "reference"),
                   help="with --measure: the code to run (default: torchtitan when it imports and the model "
                        "is its Llama-3's shape, else the reference block)")
    m.add_argument("--calibration", metavar="FILE.json",
                   help="with --measure: save the calibration here (whole or not at all); without: plan with "
                        "this saved calibration (refused if it was made for another model)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args, out, err) -> int:
    from ..plan import planner, table, torchtitan
    from ..plan.sources import from_args

    if args.formulas:
        return _formulas(args, out)
    cal = _calibration(args)
    if args.devices is None:
        if cal is not None:  # a calibration on its own is an answer
            if args.format == "json":
                print(json.dumps({"calibration": cal.to_json(), "written": args.calibration if args.measure else None}),
                      file=out)
            else:
                _print_calibration(cal, args, out)
            return EXIT_OK
        raise UsageError("plan: give the pipeline-parallel degree: --devices P")
    own_loop = args.framework in ("megatron", "deepspeed")
    if args.output is not None and not own_loop and not str(args.output).lower().endswith(".csv"):
        raise UsageError(f"-o {args.output}: torchtitan reads a .csv file; name the output FILE.csv")
    if args.output is not None and own_loop and not str(args.output).lower().endswith(".json"):
        raise UsageError(f"-o {args.output}: with --framework {args.framework}, the winner is written as its "
                         "schedverify/1 schedule; name the output FILE.json")
    source = from_args(model=args.model, profile=args.profile, trace=args.trace, device=args.device,
                       memory_limit=args.memory_limit, microbatches=args.microbatches, backend=args.backend,
                       calibration=cal, torch=args.torch)
    microbatches = source.microbatches if args.microbatches is None else args.microbatches
    if microbatches is None:
        raise UsageError("plan: how many microbatches does a step have? give --microbatches M")
    families = [f.strip() for f in args.families.split(",") if f.strip()] if args.families else None
    if args.framework is not None:
        from ..plan.frameworks import framework_plan

        result = framework_plan(args.framework, source.stages, args.devices, microbatches,
                                memory_limit=source.memory_limit, chunks=args.chunks, layers=source.layers,
                                families=families, search_time=args.search_time or None, notes=source.notes,
                                torch=args.torch)
    else:
        result = planner.plan(source.stages, args.devices, microbatches, memory_limit=source.memory_limit,
                              families=families, chunks=args.chunks,
                              search_time=args.search_time or None, notes=source.notes, torch=args.torch)
    written = None
    if args.output and result.winner is not None and own_loop:
        from ..io import dumps

        assert result.winner.schedule is not None  # a framework's candidate that fits has its schedule
        inputs = tuple(x for x in (args.model, args.profile, *(args.trace or ())) if x)
        write_output(args.output, dumps(result.winner.schedule), inputs=inputs)
        written = args.output
    elif args.output and result.winner is not None:
        text, _ = torchtitan.checked_csv(result.winner, args.output)
        inputs = tuple(x for x in (args.model, args.profile, *(args.trace or ())) if x)
        write_output(args.output, text, inputs=inputs)  # never onto an input
        written = args.output
    hint = None
    if args.framework is not None and result.winner is not None:
        from ..plan.frameworks import arguments

        hint = arguments(args.framework, result.winner, microbatches=microbatches, layers=source.layers,
                         written=written)
    framework_memory = None
    if own_loop and result.winner is not None and result.winner.schedule is not None:
        from ..frameworks.memory import memory

        framework_memory = memory(result.winner.schedule, _model(args)[0] if args.model else None, calibration=cal)
        if framework_memory is not None and hint is not None:
            hint = [*hint, *framework_memory.lines()]
    if args.format == "json":
        doc = result.to_json()
        doc["source"] = source.title
        doc["written"] = written
        doc["framework"] = args.framework
        doc["arguments"] = hint
        doc["framework_memory"] = framework_memory.to_json() if framework_memory is not None else None
        if cal is not None:
            doc["calibration"] = cal.to_json()
        print(json.dumps(doc), file=out)
    else:
        if cal is not None:
            _print_calibration(cal, args, out)
        who = f"plan for {args.framework}" if args.framework else "plan"
        title = (f"{who}: {source.title}; {args.devices} pipeline devices, {microbatches} microbatches"
                 + (f"; memory limit {table.format_bytes(source.memory_limit)}" if source.memory_limit else ""))
        print(table.text(result, title=title, written=written, framework=args.framework or "torchtitan",
                         hint=hint), file=out)
    return EXIT_OK if result.winner is not None else EXIT_INVALID


def _model(args):
    """The model file with --backend applied."""
    from dataclasses import replace

    from ..plan.transformer import load_model

    model, hw = load_model(args.model)
    if args.backend is not None:
        model = replace(model, backend=args.backend)
    return model, hw


def _calibration(args):
    """The calibration --measure makes (and saves to --calibration), or the one --calibration reads."""
    measuring = args.measure is not None
    if not measuring and (args.measure_time or args.measure_code):
        flag = "--measure-time" if args.measure_time else "--measure-code"
        raise UsageError(f"plan {flag}: goes with --measure")
    if not measuring and args.calibration is None:
        return None
    if args.model is None:
        raise UsageError("plan: --measure and --calibration are a model's: give --model FILE.toml")
    if args.calibration is not None and not str(args.calibration).lower().endswith(".json"):
        raise UsageError(f"--calibration {args.calibration}: a calibration is a .json file")
    model, _hw = _model(args)
    from ..plan.calibration import calibrate, load_calibration

    if not measuring:
        return load_calibration(args.calibration, model)
    cal = calibrate(model, device=args.measure, times=args.measure_time, code=args.measure_code)
    if args.calibration is not None:
        cal.save(args.calibration, inputs=(args.model,))
    return cal


def _print_calibration(cal, args, out) -> None:
    for line in cal.describe():
        print(line, file=out)
    if args.measure is not None and args.calibration is not None:
        print(f"  written to {args.calibration} (plan --calibration {args.calibration} reuses it)", file=out)


def _formulas(args, out) -> int:
    from ..plan import activations as act
    from ..plan.transformer import formulas_table, kept_table

    if args.model is None:
        raise UsageError("plan --formulas: the formulas are a model's: give --model FILE.toml")
    model, _hw = _model(args)
    rows = formulas_table(model)
    kept = kept_table(model)
    if args.format == "json":
        print(json.dumps({"model": model.name, "backend": model.backend, "formulas": rows, "kept": kept}), file=out)
        return EXIT_OK
    be = act.backend(model.backend)
    print(f"{model.name or args.model}: per layer and microbatch (symbols: s sequence, b microbatch, "
          "h hidden, a heads, k KV heads, f FFN, V vocabulary, t tensor parallel, e dtype bytes)", file=out)
    for r in rows:
        print(f"  {r['name']} = {r['expression']}", file=out)
        print(f"      = {r['value']:,} {r['unit']}", file=out)
    print(f"what autograd keeps: backend {be.name}, {be.title} (bytes per element of each term, "
          "without tensor parallelism)", file=out)
    for part in ("layer", "head", "embedding"):
        print(f"  {part}:", file=out)
        for r in kept[part]:
            print(f"    {r['bytes']:>5} x {r['term']:<10} {r['what']}  [{r['source']}]", file=out)
    return EXIT_OK
