"""llama.cpp's drafters that `bench --peer` runs beside ours: its draft model, its n-gram lookups
(a small grid of their settings: the defaults target long agentic contexts, small n suits short
copies), and the chains of both (`--spec-type A,B`)."""

from __future__ import annotations

from dataclasses import dataclass

from localspec.bench.runner import comma_list
from localspec.errors import LocalspecError


@dataclass(frozen=True)
class PeerVariant:
    spec_type: str
    args: tuple[str, ...] = ()

    @property
    def uses_draft(self) -> bool:  # then it runs once per fixed draft length, with the draft model
        return "draft-simple" in self.spec_type


_SMALL_SIMPLE = ("--spec-ngram-simple-size-n", "4", "--spec-ngram-simple-size-m", "8")
_SMALL_MOD = ("--spec-ngram-mod-n-match", "8", "--spec-ngram-mod-n-min", "2", "--spec-ngram-mod-n-max", "16")

PEER_VARIANTS = {
    "draft-simple": PeerVariant("draft-simple"),
    "ngram-simple": PeerVariant("ngram-simple"),  # its defaults: n=12, m=48
    "ngram-simple-4": PeerVariant("ngram-simple", _SMALL_SIMPLE),
    "ngram-mod": PeerVariant("ngram-mod", _SMALL_MOD),
    "ngram-simple+draft": PeerVariant("ngram-simple,draft-simple", _SMALL_SIMPLE),
    "ngram-mod+draft": PeerVariant("ngram-mod,draft-simple", _SMALL_MOD),
}
PEER_VARIANT_NAMES = tuple(PEER_VARIANTS)
_NGRAM = tuple(n for n in PEER_VARIANTS if n.startswith("ngram"))


def parse_peer_specs(value: str) -> list[str]:
    """'draft-simple,ngram' -> the variant names, each checked; 'ngram' is every lookup variant."""
    names = list(
        dict.fromkeys(n for part in comma_list(value) for n in (_NGRAM if part == "ngram" else (part,)))
    )
    bad = [n for n in names if n not in PEER_VARIANTS]
    if bad or not names:
        raise LocalspecError(
            f"--peer-spec takes {', '.join(PEER_VARIANT_NAMES)} or ngram, comma-separated (got {value!r})"
        )
    return names
