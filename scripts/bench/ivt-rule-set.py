#!/usr/bin/env python3
"""Writes a GIVT rule set the size of a real one to FILE: 2 000 user-agent patterns shaped like
the crawler-user-agents list's (names, classes, anchors, alternations, versions) plus the
textbook patterns that make a backtracking matcher take exponential time, and 10 000 IP ranges
(half IPv4 /24, half IPv6 /64). Usage: ivt-rule-set.py FILE [PATTERNS] [RANGES].
The benchmarks compare the tracker with and without it; the hostile-client suite floods it."""

import json
import random
import sys


def rule_set(patterns=2000, ranges=10000):
    rng = random.Random(20261125)
    words = ["bot", "spider", "crawler", "fetch", "scan", "probe", "index", "check", "monitor", "feed"]
    out = [{"pattern": p} for p in ("(a+)+$", "(a|aa)+b", "^(\\w+\\s?)*$", "(x+x+)+y", "(.*a){12}")]
    while len(out) < patterns:
        name = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(4, 9)))
        shape = rng.randrange(5)
        out.append({"pattern": [f"{name}{rng.choice(words)}", f"[{name[0].upper()}{name[0]}]{name[1:]}",
                                f"^{name}/\\d+\\.\\d+", f"({name}|{name[::-1]}){rng.choice(words)}",
                                f"{name}[-_ ]?{rng.choice(words)}/[0-9.]+"][shape]})
    cidrs = [f"{rng.randrange(1, 224)}.{rng.randrange(256)}.{rng.randrange(256)}.0/24" for _ in range(ranges // 2)]
    cidrs += [f"2001:db8:{rng.randrange(65536):x}:{rng.randrange(65536):x}::/64" for _ in range(ranges - len(cidrs))]
    return {"name": f"benchmark: {patterns} patterns, {ranges} ranges", "userAgents": out, "ipRanges": cidrs}


if __name__ == "__main__":
    with open(sys.argv[1], "w") as f:
        json.dump(rule_set(*(int(a) for a in sys.argv[2:4])), f)
