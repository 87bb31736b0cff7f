"""llama.cpp's drafters that `bench --peer` runs beside ours: its draft model, its n-gram lookups
(a small grid of their settings: the defaults target long agentic contexts, small n suits short
copies), and the chains of both (`--spec-type A,B`)."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import LocalspecError


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
    out: list[str] = []
    for part in (p.strip().lower() for p in value.split(",") if p.strip()):
        names = _NGRAM if part == "ngram" else (part,)
        for name in names:
            if name not in PEER_VARIANTS:
                raise LocalspecError(
                    f"--peer-spec takes {', '.join(PEER_VARIANT_NAMES)} or ngram, comma-separated (got {part!r})"
                )
            if name not in out:
                out.append(name)
    if not out:
        raise LocalspecError("--peer-spec needs at least one drafter")
    return out
