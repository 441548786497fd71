"""Which regions offer each Neuron instance type the experiment knows.

A snapshot of cfn-lint's per-region EC2 instance-type data (the enum cfn-lint checks
``AWS::EC2::Instance.InstanceType`` against: package ``cfnlint``, file
``data/schemas/extensions/aws_ec2_instance/instancetype_enum.json``, cfn-lint 1.58.0).
Committed so the configuration stays importable without cfn-lint (it is a dev tool);
tests/experiment/test_instance_regions.py fails when the installed cfn-lint disagrees, and
prints the table to paste here.

A type cfn-lint does not list in any region (trn2u.48xlarge, trn2.3xlarge at this version)
has no data: the configuration cannot check its region and accepts it.
"""

from __future__ import annotations

CFN_LINT_DATA_FILE = "data/schemas/extensions/aws_ec2_instance/instancetype_enum.json"

NEURON_INSTANCE_REGIONS: dict[str, tuple[str, ...]] = {
    "trn2.48xlarge": ("ap-south-2", "us-east-2"),
    "trn2u.48xlarge": (),
    "trn2.3xlarge": (),
}


def regions_offering(instance_type: str) -> tuple[str, ...] | None:
    """The regions offering the type, or None when the snapshot has no data for it."""
    regions = NEURON_INSTANCE_REGIONS.get(instance_type)
    return regions or None
