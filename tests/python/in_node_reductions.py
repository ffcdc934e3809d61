#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Counts, per pass, the partials a device received or merged and then sent on rather than stored:
a node's partials reduced on a device that does not own them (an owner stores what it receives).

  python3 tests/python/in_node_reductions.py PLAN.json   ->  "forward N backward M"
Exits 1 unless both counts are positive.
"""
import json
import sys


def sent_on(programs):
    count = 0
    for program in programs:
        kinds = [slot["kind"] for slot in program["slots"]]
        gathered = set()
        for instruction in program["instructions"]:
            op = instruction["op"]
            if op in ("merge", "sum"):
                gathered.add(instruction["dst"])
            elif op == "store":
                gathered.discard(instruction["slot"])
            elif op == "free":
                gathered.difference_update(instruction["slots"])
            elif op == "launch":
                for comm in instruction["ops"]:
                    if comm["direction"] == "recv" and kinds[comm["slot"]] in ("out", "dq", "dkv"):
                        gathered.add(comm["slot"])
                    elif comm["direction"] == "send" and comm["slot"] in gathered:
                        gathered.discard(comm["slot"])
                        count += 1
    return count


def main():
    with open(sys.argv[1]) as f:
        data = json.load(f)
    plan = data.get("plan", data)  # `dcp plan --json` wraps it; Plan.to_json() does not
    forward, backward = sent_on(plan["forward"]), sent_on(plan["backward"])
    print(f"forward {forward} backward {backward}")
    return 0 if forward > 0 and backward > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
