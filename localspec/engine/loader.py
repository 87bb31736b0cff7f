"""The one load pipeline, for the engine and for doctor: rpc-servers → devices → pair check →
memory plan → placement decision → Model/Context → placement verified from llama.cpp's log →
warm-up. Contexts are created once with `parallel` sequences of n_ctx tokens each and warmed up with
one decode, so compute buffers are reserved before the first request; requests never allocate."""

from __future__ import annotations

import math
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Callable

from localspec import draft_kinds, llama
from localspec.config.settings import Settings
from localspec.draft_kinds.base import Opening
from localspec.draft_len.memory import memory_key as key
from localspec.engine import placement
from localspec.errors import LocalspecError
from localspec.evaluator import Evaluator
from localspec.gguf import memory_plan
from localspec.gguf.compat import CompatReport, check_pair
from localspec.gguf.projector import DRAFT_NEEDS_TARGET, check_fits_text


@dataclass
class LoadedPair:
    """The loaded models and contexts (one owner: close() frees them), and what placement decided."""

    settings: Settings
    devices: list[llama.Device] = field(default_factory=list)
    pair_report: CompatReport | None = None  # the pair check, when a draft is used
    plan: placement.PairPlan | None = None
    decision: placement.Decision | None = None
    refused: str | None = None  # dry run: why the plan would not run here
    report: placement.PlacementReport | None = None  # planned against what llama.cpp did
    target: llama.Model | None = None
    target_ctx: llama.Context | None = None
    draft: llama.Model | None = None  # the drafter's own model, when it has one (a draft GGUF)
    draft_ctx: Evaluator | None = None  # the drafter's context (draft_kinds: whichever kind drafts)
    projector: llama.Projector | None = None  # the target's vision projector (--mmproj)
    draft_projector: llama.Projector | None = None  # the draft's own (--draft-mmproj): it sees images
    stack: ExitStack = field(default_factory=ExitStack)

    def contexts(self) -> list[llama.Context]:
        """The contexts with weights of their own (a drafter's head may be fed by its target's decodes)."""
        return [c for c in (self.target_ctx, self.draft_ctx) if isinstance(c, llama.Context)]

    def close(self) -> None:
        self.stack.close()

    def __enter__(self) -> "LoadedPair":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def load_pair(
    s: Settings,
    *,
    log: Callable[[str], None] = lambda line: None,
    dry_run: bool = False,
    strict: bool = True,
    decision: placement.Decision | None = None,
) -> LoadedPair:
    """Load the pair `s` names (the draft only when it drafts: not with --lookup only). Not `strict`
    (doctor), a pair that fails its check, a plan refused and a placement that differs from the
    plan are recorded instead of raised; a dry run stops before the weights. `decision` reuses one
    already made (doctor verifies its plan at a small n_ctx)."""
    strict = strict and not dry_run
    if s.target is None:
        raise LocalspecError("no target model: pass --target PATH.gguf or --pair DIR")
    out = LoadedPair(s)
    llama.add_rpc_servers(s.rpc_endpoints)  # probed first: a dead host is one line
    out.devices = llama.devices()
    if s.speculative:  # before any weights are loaded
        out.pair_report = check_pair(s.target, s.draft)
        if not out.pair_report.ok and strict:
            raise LocalspecError(out.pair_report.message)
    kind = draft_kinds.kind_of(s)
    if kind is not None:
        kind.check(s)
    _check_draft_mmproj(s)
    out.plan = placement.plan_for(s)
    if out.plan.projector is not None:  # before any weights: a projector made for another model
        check_fits_text(out.plan.projector, out.plan.target.spec.n_embd)
    if out.plan.draft_projector is not None:  # read only where a draft model is loaded
        check_fits_text(out.plan.draft_projector, out.plan.draft.spec.n_embd, "draft")
    try:
        out.decision = decision or placement.enforce(out.plan, out.devices, s)
    except LocalspecError as e:
        if strict:
            raise
        out.refused = str(e)
        return out
    if dry_run:
        return out
    try:
        _load(out, log, strict)
    except BaseException:
        out.close()
        raise
    return out


def _load(out: LoadedPair, log: Callable[[str], None], strict: bool) -> None:
    s, dec, st = out.settings, out.decision, out.stack
    kind = draft_kinds.kind_of(s)
    assert dec is not None and out.plan is not None
    for line in dec.messages():
        log(line)
    common = s.context_args()
    out.target = st.enter_context(
        llama.Model(
            s.target,
            n_gpu_layers=dec.target_gpu_layers,
            devices=dec.model_devices("target"),
            model_params=kind.target_params(s) if kind is not None else None,
        )
    )
    on_gpu = dec.mode in ("gpu", "partial")
    if s.mmproj is not None:  # freed before the target it reads (the stack unwinds in reverse)
        out.projector = st.enter_context(
            llama.Projector(s.mmproj, out.target, n_threads=s.n_threads, use_gpu=on_gpu)
        )
        log(f"vision projector: {s.mmproj.name} ({out.projector.facts.projector_type})")
    n_rs = memory_plan.rs_keep(s)  # llama.cpp clamps it to 0 on archs without rs rollback
    out.target_ctx = st.enter_context(
        llama.Context(out.target, **common, n_rs_seq=n_rs, projector=out.projector)
    )
    if past := past_training(s, out.target, out.target_ctx.n_ctx):
        log(past)
    if out.target_ctx.memory_kind != "attention":
        log(f"target memory: {out.target_ctx.memory_kind}, rollback by {out.target_ctx.rollback}")
    if kind is not None:
        o = Opening(s, out.target, out.target_ctx, out.projector, dec, st, log)
        out.draft_ctx, out.draft, out.draft_projector = kind.open(o)
    for ctx in (out.target_ctx, out.draft_ctx) if out.projector is not None else ():
        if ctx is not None:
            out.projector.watch(ctx)  # the image ids they cache keep their numbers
    out.report = placement.verify(
        out.plan,
        dec,
        out.target.load_log + out.target_ctx.init_log,
        out.draft.load_log + out.draft_ctx.init_log if out.draft is not None else None,
    )
    for problem in out.report.require_clean(s) if strict else ():  # raises unless --allow-partial-offload
        log(f"warning: {problem}")
    log(out.report.summary())
    for ctx in out.contexts():  # warm-up: reserve compute buffers now, not on the first request
        ctx.eval([ctx.model.vocab.bos if ctx.model.vocab.bos >= 0 else 0], 0, 1)
        ctx.reset()
    if kind is not None:
        kind.after_warmup(out.draft_ctx)


def _check_draft_mmproj(s: Settings) -> None:
    """--draft-mmproj rides on the target's projector (it numbers the images both read)."""
    if s.draft_mmproj is None:
        return
    if s.mmproj is None:
        raise LocalspecError(DRAFT_NEEDS_TARGET)
    kind = draft_kinds.kind_of(s)
    if kind is not None and not kind.has_file:
        raise LocalspecError(
            f"--draft-mmproj is the draft GGUF's projector; --draft {kind.name} has no draft GGUF"
        )


def memory_key(out: LoadedPair) -> Callable[[], dict[str, Any]]:
    """The tuner memory's key for this load (computed only when the memory is used)."""
    dec = out.decision
    assert dec is not None
    return lambda: key(
        out.settings, dec.target_gpu_layers, dec.draft_gpu_layers, draft_kinds.cache_key(out.settings)
    )


def past_training(s: Settings, target: llama.Model, n_ctx: int) -> str | None:
    """The warning for a slot longer than the target's trained context (stretched by RoPE scaling):
    answers reaching past it degenerate (llama.cpp warns as much in its log, unread by most)."""
    scale = 1.0 if s.rope_scaling == "none" else s.rope_scale or 1 / target.rope_freq_scale_train
    trained = round(target.n_ctx_train * scale)
    if not target.n_ctx_train or n_ctx <= trained:
        return None
    return (
        f"warning: --n-ctx {n_ctx} is past {target.path.name}'s trained context ({trained} tokens): answers "
        f"that reach past it may degenerate; `--rope-scaling yarn --rope-scale "
        f"{math.ceil(n_ctx / target.n_ctx_train)}` stretches the model's positions to fit (docs/settings.md)"
    )
