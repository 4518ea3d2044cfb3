"""aws-batch/template.yaml: valid CloudFormation for cfn-lint (AWS's linter, which checks every
resource's properties against CloudFormation's schemas), and its job role reaches only the two
buckets it names."""

from __future__ import annotations

from typing import Any

from tests.conftest import REPO

TEMPLATE = REPO / "aws-batch" / "template.yaml"


def test_the_template_passes_cfn_lint_which_would_catch_a_wrong_value() -> None:
    from cfnlint.api import lint_all

    text = TEMPLATE.read_text()
    # Errors and warnings, as the cfn-lint command reports them by default (not the I* notes).
    assert [str(match) for match in lint_all(text) if match.rule.id[0] in "EW"] == []
    # The linter checks values, not only names: a Spot strategy Batch does not have is caught.
    broken = text.replace("SPOT_PRICE_CAPACITY_OPTIMIZED", "SPOT_CHEAPEST_FIRST")
    assert any(match.rule.id == "E3030" and "spot_cheapest_first" in str(match).lower() for match in lint_all(broken))


def test_the_job_role_may_read_the_input_and_write_the_output_and_nothing_else() -> None:
    from cfnlint.decode import decode_str

    template, problems = decode_str(TEMPLATE.read_text())
    assert not problems and template is not None
    role: dict[str, Any] = template["Resources"]["JobRole"]["Properties"]
    statements = [s for policy in role["Policies"] for s in policy["PolicyDocument"]["Statement"]]
    actions = {a for s in statements for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])}
    assert actions == {"s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:DeleteObject"}
    writes = [s for s in statements if "s3:PutObject" in s["Action"]]
    assert [str(s["Resource"]) for s in writes] == [str({"Fn::Sub": "arn:${AWS::Partition}:s3:::${OutputBucket}/*"})]
    assert "ManagedPolicyArns" not in role and all(s["Resource"] != "*" for s in statements)
