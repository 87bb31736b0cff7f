"""ms a token after the first and the prompt pass, ours plain (an Engine, the pair loaded) against
llama-server's /infill plain on the same FIM problems and GGUFs, interleaved, each side timed by
itself (our response stats, llama-server's `timings`): docs/benchmarks.md's FIM section.

    LOCALSPEC_PEER_BIN=third_party/llama.cpp-build/bin .venv/bin/python research/fim_server_timings.py
"""

from __future__ import annotations

import json
import statistics
import urllib.request

from localspec.bench import fim_peer
from localspec.bench.concurrency import PeerServer
from localspec.bench.fim import load_problems
from localspec.bench.suite import peer_settings
from localspec.config.settings import Settings
from localspec.engine import Engine
from localspec.serving import fim

N = 32  # tokens: no n_indent cut, so every request decodes about as many


def theirs(port: int, body: dict) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/infill", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)["timings"]


def main() -> None:
    s0 = Settings.load(pair="models/default", tuner_cache=False, no_log=True)
    ps = peer_settings(s0)
    rows = []
    with Engine(s0) as eng, PeerServer(ps, 1, None) as srv:
        t = eng.target
        bos = t.vocab.bos if t.vocab.add_bos else None
        s = eng.settings.replace(temperature=0.0, max_tokens=N, spec=False)
        for _ in range(3):
            for p in load_problems():
                lay = fim.layout(
                    p.fill(), t.fim_tokens(), lambda x: t.tokenize(x, add_special=False),
                    n_ctx=eng.target_ctx.n_ctx, n_predict=N, bos=bos,
                )  # fmt: skip
                tm = theirs(srv.port, fim_peer.body(p, N, ps) | {"stream": False, "n_indent": 0})
                eng.clear_cache()
                resp = None
                for ch in eng.submit(lay.ids, settings=s, lookup_text=lay.lookup_text):
                    resp = ch.response or resp
                st, n = resp.stats, resp.stats.n_generated - 1
                if n >= 3 and tm["predicted_n"] >= 4:
                    rows.append(
                        (st.decode_ms / n, tm["predicted_per_token_ms"], st.prefill_ms, tm["prompt_ms"])
                    )
                    print(p.id, "ms/token ours %.1f theirs %.1f | prompt ours %.0f theirs %.0f" % rows[-1])
    print("per-request ratio, ms a token:", statistics.median(a / b for a, b, _, _ in rows))
    print("per-request ratio, prompt pass:", statistics.median(c / d for _, _, c, d in rows))


if __name__ == "__main__":
    main()
