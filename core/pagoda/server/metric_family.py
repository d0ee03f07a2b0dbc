"""Prometheus text exposition (version 0.0.4), written by hand: labelled counters and histograms whose
state is plain data, so that the API server answering a scrape can add the other API servers' counts."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

Labels = tuple[str, ...]  # label values, in the family's label-name order


@dataclass
class Histogram:
    """Cumulative-bucket histogram (Prometheus ``_bucket``/``_sum``/``_count``)."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)  # per bucket (not cumulative); above the last: count - sum
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        index = bisect.bisect_left(self.buckets, value)
        if index < len(self.counts):
            self.counts[index] += 1
        self.total += value
        self.count += 1

    def add(self, counts: list[int], total: float, count: int) -> None:
        """Add another histogram's state (same buckets)."""
        self.counts = [a + b for a, b in zip(self.counts, counts)]
        self.total += total
        self.count += count

    def render(self, name: str, labels: str) -> list[str]:
        lines, running = [], 0
        for bound, n in zip(self.buckets, self.counts):
            running += n
            lines.append(f'{name}_bucket{{{labels},le="{float(bound)}"}} {running}')
        lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {self.count}')
        lines.append(f"{name}_sum{{{labels}}} {self.total}")
        lines.append(f"{name}_count{{{labels}}} {self.count}")
        return lines


def label_text(names: tuple[str, ...], values: Labels) -> str:
    return ",".join(f'{n}="{escape(v)}"' for n, v in zip(names, values))


def header(name: str, kind: str, text: str) -> list[str]:
    return [f"# HELP {name} {text}", f"# TYPE {name} {kind}"]


class Family:
    """One metric name with a series per label values; ``name`` has no prefix (added when rendered)."""

    kind = ""

    def __init__(self, name: str, text: str, label_names: tuple[str, ...]) -> None:
        self.name, self.text, self.label_names = name, text, label_names

    def lines(self, prefix: str, seed: list[Labels] = ()) -> list[str]:
        """Its exposition; ``seed``: label values shown at zero when they have no series yet."""
        raise NotImplementedError


class CounterFamily(Family):
    kind = "counter"

    def __init__(self, name: str, text: str, label_names: tuple[str, ...]) -> None:
        super().__init__(name, text, label_names)
        self.values: dict[Labels, float] = {}

    def inc(self, labels: Labels, amount: float = 1) -> None:
        self.values[labels] = self.values.get(labels, 0) + amount

    def state(self) -> list:
        return [[list(labels), value] for labels, value in self.values.items()]

    def add(self, state: list) -> None:
        for labels, value in state:
            self.inc(tuple(labels), value)

    def lines(self, prefix: str, seed: list[Labels] = ()) -> list[str]:
        name = f"{prefix}:{self.name}"
        values = {**dict.fromkeys(seed, 0), **self.values}
        return header(name, self.kind, self.text) + [
            f"{name}{{{label_text(self.label_names, labels)}}} {value}" for labels, value in sorted(values.items())]


class HistogramFamily(Family):
    kind = "histogram"

    def __init__(self, name: str, text: str, label_names: tuple[str, ...], buckets: tuple[float, ...]) -> None:
        super().__init__(name, text, label_names)
        self.buckets = buckets
        self.series: dict[Labels, Histogram] = {}

    def observe(self, labels: Labels, value: float) -> None:
        series = self.series.get(labels)
        if series is None:
            series = self.series[labels] = Histogram(self.buckets)
        series.observe(value)

    def state(self) -> list:
        return [[list(labels), h.counts, h.total, h.count] for labels, h in self.series.items()]

    def add(self, state: list) -> None:
        for labels, counts, total, count in state:
            key = tuple(labels)
            self.series.setdefault(key, Histogram(self.buckets)).add(counts, total, count)

    def lines(self, prefix: str, seed: list[Labels] = (), name: str | None = None) -> list[str]:
        """``name``: render under another name (an alias)."""
        name = f"{prefix}:{name or self.name}"
        series = {**{labels: Histogram(self.buckets) for labels in seed}, **self.series}
        out = header(name, self.kind, self.text)
        for labels, histogram in sorted(series.items()):
            out += histogram.render(name, label_text(self.label_names, labels))
        return out


def one_two_five(limit: int) -> tuple[int, ...]:
    """1, 2, 5, 10, 20, 50, ... up to ``limit`` (vLLM's token-count buckets: limit = max_model_len)."""
    out, scale = [], 1
    while True:
        for mantissa in (1, 2, 5):
            if mantissa * scale > limit:
                return tuple(out)
            out.append(mantissa * scale)
        scale *= 10


def escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
