"""Write prometheusrule.yaml from the plain rules file, so the two cannot drift.

python deploy/kubernetes/render-prometheusrule.py          # rewrite it
python deploy/kubernetes/render-prometheusrule.py --check  # exit 1 if stale
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
RULES = HERE.parent / "prometheus" / "sweeperd-rules.yml"
TARGET = HERE / "prometheusrule.yaml"

HEADER = """\
# GENERATED from deploy/prometheus/sweeperd-rules.yml by
# deploy/kubernetes/render-prometheusrule.py: edit the rules there, then rerun.
# For the Prometheus Operator; with kube-prometheus-stack add the label
# `release: <your release name>` so its Prometheus picks the rules up.
apiVersion: monitoring.coreos.com/v1
kind: PrometheusRule
metadata:
  name: sweeperd
  labels:
    app.kubernetes.io/name: sweeperd
spec:
"""


def render(rules_text: str) -> str:
    """The PrometheusRule manifest whose spec is the rules document, comments dropped."""
    body = [line for line in rules_text.splitlines() if not line.startswith("#")]
    return HEADER + "".join(f"  {line}\n" if line else "\n" for line in body)


def main(argv: list[str]) -> int:
    wanted = render(RULES.read_text())
    if "--check" in argv:
        if TARGET.read_text() != wanted:
            print(f"{TARGET} is stale: run {Path(__file__).name}", file=sys.stderr)
            return 1
        return 0
    TARGET.write_text(wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
