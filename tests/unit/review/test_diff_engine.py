"""Comparing two plan documents: what a reviewer reads in the pull request comment."""

from __future__ import annotations

import copy
from typing import Any

from gpuinfra.review import diff


def plan(**extra: Any) -> dict[str, Any]:
    document: dict[str, Any] = {
        "kind": "stack",
        "stack": "prod",
        "resources": [
            {
                "type": "aws:eks/nodeGroup:NodeGroup",
                "name": "prod-gpu",
                "properties": {"scalingConfig": {"desiredSize": 2, "maxSize": 4}, "tags": {}},
            },
            {
                "type": "aws:ec2/vpc:Vpc",
                "name": "prod-vpc",
                "properties": {"cidrBlock": "10.0.0.0/16"},
            },
        ],
        "helm_releases": [
            {
                "release": "gpu-operator",
                "namespace": "gpu-operator",
                "chart": {"repository": "r", "name": "gpu-operator", "version": "v26.7.0"},
                "values": {"driver": {"enabled": False}, "mig": {"strategy": "single"}},
            }
        ],
        "objects": [
            {
                "apiVersion": "monitoring.coreos.com/v1",
                "kind": "PrometheusRule",
                "metadata": {"name": "gpu-alerts", "namespace": "monitoring"},
                "spec": {
                    "groups": [
                        {
                            "name": "gpu",
                            "rules": [{"alert": "GpuHot", "expr": "temp > 85", "for": "5m"}],
                        }
                    ]
                },
            }
        ],
        "cost": {"monthly_desired_usd": 100.0, "monthly_max_usd": 200.0, "lacking_prices": []},
    }
    document.update(extra)
    return document


def test_unchanged_plans_report_nothing() -> None:
    result = diff.diff_plans("stack prod", plan(), plan())
    assert result.status == "unchanged"
    assert result.sections == {}
    assert not result.cost


def test_resource_change_is_reported_property_by_property() -> None:
    head = plan()
    head["resources"][0]["properties"]["scalingConfig"]["desiredSize"] = 3
    head["resources"][0]["properties"]["tags"] = {"team": "ml"}
    result = diff.diff_plans("stack prod", plan(), head)
    assert result.status == "changed"
    (changed,) = result.sections["resources"].changed
    assert changed.key == "aws:eks/nodeGroup:NodeGroup prod-gpu"
    assert [(c.path, c.old, c.new) for c in changed.changes] == [
        ("scalingConfig.desiredSize", 2, 3),
        ("tags", {}, diff.MISSING),
        ("tags.team", diff.MISSING, "ml"),
    ]


def test_added_and_removed_resources() -> None:
    head = plan()
    head["resources"] = [
        *head["resources"][:1],
        {"type": "aws:fsx/lustreFileSystem:LustreFileSystem", "name": "prod-fsx", "properties": {}},
    ]
    section = diff.diff_plans("stack prod", plan(), head).sections["resources"]
    assert section.added == ("aws:fsx/lustreFileSystem:LustreFileSystem prod-fsx",)
    assert section.removed == ("aws:ec2/vpc:Vpc prod-vpc",)


def test_helm_values_and_chart_version_changes() -> None:
    head = plan()
    head["helm_releases"][0]["values"]["mig"]["strategy"] = "mixed"
    head["helm_releases"][0]["chart"]["version"] = "v26.7.1"
    (changed,) = diff.diff_plans("stack prod", plan(), head).sections["helm_releases"].changed
    assert changed.key == "gpu-operator/gpu-operator"
    assert [(c.path, c.old, c.new) for c in changed.changes] == [
        ("chart.version", "v26.7.0", "v26.7.1"),
        ("values.mig.strategy", "single", "mixed"),
    ]


def test_alert_added_removed_and_changed() -> None:
    head = copy.deepcopy(plan())
    rules = head["objects"][0]["spec"]["groups"][0]["rules"]
    rules[0]["for"] = "10m"
    rules.append({"alert": "GpuIdle", "expr": "util < 5", "for": "2h"})
    section = diff.diff_plans("stack prod", plan(), head).sections["alerts"]
    assert section.added == ("GpuIdle",)
    assert [c.key for c in section.changed] == ["GpuHot"]
    back = diff.diff_plans("stack prod", head, plan()).sections["alerts"]
    assert back.removed == ("GpuIdle",)


def test_cost_delta_per_month() -> None:
    head = plan(
        cost={"monthly_desired_usd": 150.5, "monthly_max_usd": 200.0, "lacking_prices": ["NAT"]}
    )
    cost = diff.diff_plans("stack prod", plan(), head).cost
    assert cost is not None
    assert (cost.delta_desired, cost.delta_max) == (50.5, 0.0)
    assert cost.lacking_added == ("NAT",)


def test_lines_that_lose_their_price_make_the_delta_unknown_not_a_saving() -> None:
    from gpuinfra.cli import review
    from gpuinfra.cli.console import render_text

    # The stack moved to a region the price tables lack: its pool and volumes are still there,
    # only their prices are gone.
    unpriced = ["pool gpu: g6e.xlarge (on-demand)", "pool gpu: root volumes (gp3, 200 GiB each)"]
    head = plan(
        cost={"monthly_desired_usd": 0.0, "monthly_max_usd": 0.0, "lacking_prices": unpriced}
    )
    result = diff.diff_plans("stack prod", plan(), head)
    report = diff.Report(
        base="main", base_commit="0" * 40, versions=diff.VersionsDiff(), targets=(result,)
    )
    text = diff.render_markdown(report)
    assert (
        "| at desired size | $100.00 | $0.00 | **unknown** (2 lines now without a price; "
        "priced lines -$100.00) |"
    ) in text
    assert "**-$100.00**" not in text
    table = render_text(review.diff_tables(report))
    row = next(line for line in table.splitlines() if "monthly at desired size" in line)
    assert "delta unknown" in row, table
    assert "now lacking a price" in table and "g6e.xlarge (on-demand)" in table
    assert result.cost is not None
    assert result.cost.document()["delta_known"] is False
    assert result.cost.document()["monthly_desired_usd"]["delta"] == -100.0

    # Prices found again read as a rise of the same kind: unknown too.
    back = diff.Report(
        base="main",
        base_commit="0" * 40,
        versions=diff.VersionsDiff(),
        targets=(diff.diff_plans("stack prod", head, plan()),),
    )
    assert "**unknown** (2 lines newly priced; priced lines +$100.00) |" in diff.render_markdown(
        back
    )


def test_a_delta_over_the_same_priced_lines_is_known() -> None:
    same = {"monthly_desired_usd": 150.0, "monthly_max_usd": 200.0, "lacking_prices": ["NAT"]}
    result = diff.diff_plans(
        "stack prod", plan(cost={**same, "monthly_desired_usd": 100.0}), plan(cost=same)
    )
    assert result.cost is not None and result.cost.document()["delta_known"] is True
    added = diff.diff_plans("stack perf", None, plan(cost=same)).cost
    assert added is not None and added.document()["delta_known"] is True


def test_new_stack_is_added_with_its_whole_cost() -> None:
    result = diff.diff_plans("stack perf", None, plan())
    assert result.status == "added"
    assert result.cost is not None and result.cost.delta_desired == 100.0


def test_markdown_shows_cost_delta_alerts_and_warnings() -> None:
    head = plan(
        cost={"monthly_desired_usd": 1100.0, "monthly_max_usd": 200.0, "lacking_prices": []}
    )
    head["objects"][0]["spec"]["groups"][0]["rules"].append({"alert": "XidError", "expr": "x"})
    report = diff.Report(
        base="origin/main",
        base_commit="0123456789abcdef",
        versions=diff.VersionsDiff(
            bumped=(diff.Change("kueue", "0.19.2", "0.20.0"),),
            warnings=("versions.yaml: kueue.version: kueue 0.20 is not in the table",),
        ),
        targets=(diff.diff_plans("stack prod", plan(), head),),
    )
    text = diff.render_markdown(report)
    assert "## gpuinfra diff against `origin/main` (0123456789ab)" in text
    assert "| kueue | `0.19.2` | `0.20.0` |" in text
    assert "> **Warning:** versions.yaml: kueue.version" in text
    assert "| at desired size | $100.00 | $1,100.00 | **+$1,000.00** |" in text
    assert "- added `XidError`" in text


def test_table_lists_each_changed_property() -> None:
    from gpuinfra.cli import review
    from gpuinfra.cli.console import render_text

    head = plan()
    head["resources"][0]["properties"]["scalingConfig"]["desiredSize"] = 3
    head["versions"] = {"kueue": {"version": "0.19.3"}}
    report = diff.Report(
        base="main",
        base_commit="0" * 40,
        versions=diff.VersionsDiff(bumped=(diff.Change("kueue", "0.19.2", "0.19.3"),)),
        targets=(diff.diff_plans("stack prod", plan(), head),),
    )
    table = render_text(review.diff_tables(report))
    assert "stack prod: changed" in table
    row = next(line for line in table.splitlines() if "scalingConfig.desiredSize" in line)
    assert "prod-gpu" in row and "2" in row and "3" in row
    assert "Pinned versions in force changed" in diff.render_markdown(report)


def test_same_name_under_two_parents_are_two_resources() -> None:
    base = plan()
    twin = {"type": "aws:ec2/vpc:Vpc", "name": "prod-vpc", "parent": "other", "properties": {}}
    base["resources"][1]["parent"] = "network"
    head = copy.deepcopy(base)
    head["resources"].append(twin)
    section = diff.diff_plans("stack prod", base, head).sections["resources"]
    assert section.added == (
        "aws:ec2/vpc:Vpc prod-vpc (parent network)",
        "aws:ec2/vpc:Vpc prod-vpc (parent other)",
    )
    later = copy.deepcopy(head)
    later["resources"][-1]["properties"] = {"cidrBlock": "10.1.0.0/16"}
    (changed,) = diff.diff_plans("stack prod", head, later).sections["resources"].changed
    assert changed.key == "aws:ec2/vpc:Vpc prod-vpc (parent other)"


def test_markdown_that_would_not_fit_a_comment_names_what_it_leaves_out() -> None:
    head = plan()
    head["helm_releases"][0]["values"] = {f"key{i}": "x" * 50 for i in range(400)}
    report = diff.Report(
        base="origin/main",
        base_commit="0" * 40,
        versions=diff.VersionsDiff(),
        targets=(diff.diff_plans("stack prod", plan(), head),),
    )
    full = diff.render_markdown(report)
    assert len(full) > 20_000
    short = diff.render_markdown(report, limit=10_000)
    assert len(short) < 10_000
    assert "not shown: stack prod" in short
