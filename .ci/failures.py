"""Print each failing test of a pytest JUnit report with the tail of its output and log records.

Usage: python .ci/failures.py build/test-logs/junit.xml [LINES]   (LINES: lines per stream, default 80)
"""

from __future__ import annotations

import sys
import xml.etree.ElementTree as ET


def main(argv: list[str]) -> int:
    path = argv[1]
    lines = int(argv[2]) if len(argv) > 2 else 80
    failed = 0
    summary: list[str] = []
    for case in ET.parse(path).getroot().iter("testcase"):
        problems = [c for c in case if c.tag in ("failure", "error")]
        if not problems:
            continue
        failed += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        print(f"\n======== FAILED {name} ({case.get('time', '?')} s)")
        for problem in problems:
            print(f"---- {problem.tag}: {problem.get('message', '')[:500]}")
            first = (problem.get("message", "") or "").strip().splitlines()[:1]
            summary.append(f"{name}: {first[0][:300] if first else problem.tag}")
            print("\n".join((problem.text or "").splitlines()[-lines:]))
        for stream in ("system-out", "system-err"):
            for element in case.iter(stream):
                text = (element.text or "").splitlines()
                if text:
                    print(f"---- {stream} (last {min(lines, len(text))} of {len(text)} lines)")
                    print("\n".join(text[-lines:]))
    # Last, one line per failure: a reader who sees only the end of a long printout still has every cause.
    if summary:
        print("\n======== failures, one line each")
        print("\n".join(summary))
    print(f"\n{failed} failing test(s) in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
