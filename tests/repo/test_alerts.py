"""The alerts as the pages say them: the operations table is the rules file, each runbook is
the table's advice, every time said of an alert is its rule's, every failure reason has its
own advice."""

from __future__ import annotations

import re
from typing import Any

import pytest

from sweeperd.reasons import Reason
from tests.support.doc_pages import PAGES
from tests.support.paths import REPO
from tests.support.shipped import Timing, durations, rules

OPERATIONS = REPO / "docs" / "operations.md"
METRICS = REPO / "docs" / "metrics.md"
POINTER = "; see docs/operations.md#alerts."  # how every runbook ends
LABEL = re.compile(r"\{\{ \$labels\.(\w+) \}\}")  # a label in an annotation, shown as <label>
LINK = re.compile(r"\[[^\]]*\]\(([\w-]+\.md#[\w-]+)\)")  # a page's link, docs/<page> in a runbook
ALERT_NAME = re.compile(r"\bSweeperd[A-Z]\w+")
FIRING = re.compile(r"\b(?:fires|pages|fire|page)\b")
# Every reason a failed call is counted under; a held call (migrating) is no failure.
FAILURE_REASONS = frozenset(str(r) for r in Reason) - {str(Reason.MIGRATING)}
FENCED = re.compile(r"^```.*?^```$", re.M | re.S)
NO_WAIT = "—"  # the table's `for` of an alert that fires at once


def table() -> dict[str, dict[str, str]]:
    """The alerts table of docs/operations.md, a row per alert, by its header's words."""
    section = OPERATIONS.read_text().partition("\n## Alerts\n")[2].partition("\n## ")[0]
    lines = [line for line in section.splitlines() if line.startswith("| ")]
    header, rows = cells(lines[0]), [cells(line) for line in lines[1:]]  # no |---| line
    return {row[0]: dict(zip(header, row, strict=True)) for row in rows}


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split(" | ")]


def advice(cell: str) -> str:
    """A table cell's advice as a runbook says it: links as paths, `<label>` as the label."""
    return LINK.sub(r"docs/\1", cell).removesuffix(".")


def runbook_advice(rule: dict[str, Any]) -> str:
    return LABEL.sub(r"<\1>", rule["annotations"]["runbook"]).removesuffix(POINTER)


def sentences(text: str) -> list[str]:
    """A page's prose (its fenced blocks dropped, its code spans kept: alert names are in them)
    cut into paragraphs, table rows and list items, their lines joined, then into sentences."""
    found = []
    for paragraph in re.split(r"\n(?=\s*\n|\| |- )", FENCED.sub("", text)):
        found += re.split(r"(?<=[.;])\s+", " ".join(paragraph.split()))
    return found


def reasons_advised(runbook: str) -> list[str]:
    """The reasons a `By reason:` runbook gives advice for: each clause opens with its
    reasons, `a`/`b` — and its advice."""
    heads = re.findall(r"(?:: |; )((?:`\w+`/)*`\w+`) — ", runbook)
    return [name for head in heads for name in re.findall(r"`(\w+)`", head)]


RULES = {rule["alert"]: rule for rule in rules()}


class TestTheTable:
    def test_it_lists_every_alert_once(self) -> None:
        """The operations table has a row for each alert of the rules file, and no other."""
        assert sorted(table()) == sorted(RULES)

    @pytest.mark.parametrize("alert", sorted(RULES))
    def test_its_row_is_the_rule(self, alert: str) -> None:
        """Its expression, `for` and severity are the rule's, character for character."""
        row, rule = table()[alert], RULES[alert]
        assert (row["expression"], row["for"], row["severity"]) == (
            f"`{rule['expr']}`",
            rule.get("for", NO_WAIT),
            rule["labels"]["severity"],
        )

    @pytest.mark.parametrize("alert", sorted(RULES))
    def test_its_advice_is_the_runbook(self, alert: str) -> None:
        """What the table says to do is the runbook the alert carries, word for word (its
        labels shown as <label>, its page links as paths), and the runbook points here."""
        rule = RULES[alert]
        assert rule["annotations"]["runbook"].endswith(POINTER)
        assert advice(table()[alert]["what to do"]) == runbook_advice(rule)


class TestTimes:
    @pytest.mark.parametrize("alert", sorted(RULES))
    def test_what_the_alert_says_are_its_times(self, alert: str) -> None:
        """Every length of time its summary, description and table row name is one of its
        rule's: a window, the threshold, the `for`, or the two together."""
        rule, timing = RULES[alert], Timing.of(RULES[alert])
        said = [rule["annotations"]["summary"], rule["annotations"]["description"]]
        said += table()[alert].values()
        wrong = {text: durations(text) - timing.lengths for text in said}
        assert {text: extra for text, extra in wrong.items() if extra} == {}

    def test_a_page_that_says_when_an_alert_fires_says_its_whole_wait(self) -> None:
        """A sentence of the pages that says when an alert fires or pages gives the rule's
        times: the threshold and the `for` together (`over 5 minutes for 2 minutes more`),
        never the threshold alone."""
        checked, wrong = 0, []
        for page in PAGES:
            for sentence in sentences(page.read_text()):
                said = durations(sentence)
                if not (said and FIRING.search(sentence)):
                    continue
                for alert in set(ALERT_NAME.findall(sentence)) & set(RULES):
                    checked += 1
                    if not Timing.of(RULES[alert]).said_of_firing(said):
                        wrong.append((page.name, alert, sentence))
        assert checked >= 2 and wrong == []

    def test_timing_reads_the_rules(self) -> None:
        """A rule's times: SweeperdRecoveryLate waits 300 s and 2 minutes more, so fires 7
        minutes after its lease expired; saying 5 minutes alone is not its firing."""
        late = Timing.of(RULES["SweeperdRecoveryLate"])
        assert (late.threshold_s, late.for_s, late.fires_after_s) == (300, 120, 420)
        assert not late.said_of_firing({300})
        assert late.said_of_firing({420}) and late.said_of_firing({300, 120})
        spike = Timing.of(RULES["SweeperdDeadLetterSpike"])
        assert (spike.windows, spike.threshold_s, spike.for_s) == (frozenset({600.0}), None, 0.0)


class TestReasons:
    def test_the_failing_sweeps_runbook_advises_each_reason_once(self) -> None:
        """SweeperdSweepsFailing's runbook gives advice for every failure reason the code
        counts, each in a clause of its own, so a hint is given only for its reason."""
        named = reasons_advised(RULES["SweeperdSweepsFailing"]["annotations"]["runbook"])
        assert sorted(named) == sorted(FAILURE_REASONS)

    def test_the_pages_list_the_code_reasons(self) -> None:
        """The reasons operations.md and metrics.md list for sweeperd_sweep_failures_total are
        the code's, every one."""
        joined = " ".join(OPERATIONS.read_text().split())
        listed = re.search(r"fixed `reason` values \(([^)]*)\)", joined)
        assert listed is not None
        assert set(re.findall(r"`(\w+)`", listed.group(1))) == FAILURE_REASONS
        row = next(line for line in METRICS.read_text().splitlines() if "failures_total`" in line)
        assert set(re.findall(r"`(\w+)`", row.partition("∈")[2])) == FAILURE_REASONS
