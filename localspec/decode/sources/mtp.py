"""The target's own multi-token-prediction head (llama/mtp.py) as the drafter: it drafts exactly as a
draft model does - batched steps, the grammar's runs after its tokens, the plan's stops - over a
context whose cache the target's own decodes feed (so it rarely has anything to catch up on). Its
drafts are counted as its own in the stats, and learned as a draft model's by the tuner."""

from __future__ import annotations

from localspec.decode.sources.base import SourceSpec
from localspec.decode.sources.model import ModelSource
from localspec.draft_len.evidence import MODEL


class MtpSource(ModelSource):
    spec = SourceSpec("mtp", evidence=MODEL)
