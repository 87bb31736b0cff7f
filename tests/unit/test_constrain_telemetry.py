"""The grammar as a draft source in the acceptance log and `localspec stats`; a schema's text stays
out of the log (its digest goes in)."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from localspec.config.settings import Settings
from localspec.decode.stats import Counters, Stats
from localspec.telemetry.acclog import record
from localspec.telemetry.logstats import summarize


def _response(sources: list[str], n_accepted: int) -> SimpleNamespace:
    c = Counters()
    c.record_round(4, len(sources), n_accepted, sources=sources)
    stats = Stats.build(
        c, speculative=True, n_prompt=10, n_generated=n_accepted + 1, decode_s=0.1, total_s=0.2
    )
    return SimpleNamespace(stats=stats, finish_reason="stop", seed=1)


def test_log_lines_count_each_source_and_keep_schemas_out():
    schema = json.dumps(
        {"type": "object", "properties": {"a": {"type": "string", "description": "x" * 5000}}}
    )
    s = Settings(json_schema=schema)
    now = time.time()
    recs = [
        record(
            _response(["grammar", "grammar", "draft", "draft"], 3), s, source="run", started=now, ended=now
        ),
        record(_response(["grammar", "lookup", "draft"], 1), s, source="server", started=now, ended=now),
    ]
    line = json.dumps(recs[0])
    assert "xxxxx" not in line and recs[0]["settings"]["json_schema"]["bytes"] == len(schema)
    got = summarize(recs).draft_sources
    assert got["grammar"] == {"drafted": 3, "accepted": 3}
    assert got["draft"] == {"drafted": 3, "accepted": 1} and got["lookup"] == {"drafted": 1, "accepted": 0}
