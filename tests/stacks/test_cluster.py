"""Targeted checks of the synthesized cluster: what the issue's "done when" promises."""

from __future__ import annotations

import json

import pytest
from aws_cdk import assertions
from cdk_synth import decode_manifest

from stacks.addons import (
    CLOUDWATCH_NAMESPACE,
    CLOUDWATCH_OBSERVABILITY,
    CLOUDWATCH_SERVICE_ACCOUNT,
    POD_IDENTITY_AGENT,
    S3_CSI_DRIVER,
    S3_CSI_NAMESPACE,
    S3_CSI_SERVICE_ACCOUNT,
    VPC_CNI,
)
from stacks.neuron_dra import RELEASE, dra_helm_values
from stacks.node_groups import CAPACITY_BLOCK_MARKET_TYPE, NEURON_TAINT_KEY
from stacks.workloads import LOADTEST_CONTEXT_INCLUDES

pytestmark = pytest.mark.infra

Match = assertions.Match


def _template(synth, stack: str) -> assertions.Template:
    return assertions.Template.from_json(synth.templates[stack])


def _neuron_nodegroup(synth) -> dict:
    groups = synth.resources("Cluster", "AWS::EKS::Nodegroup")
    neuron = [g for g in groups.values() if g["Properties"].get("Taints")]
    assert len(neuron) == 1, "exactly one tainted (Neuron) node group"
    return neuron[0]["Properties"]


def _neuron_subnet_azs(synth) -> set[str]:
    """The AZs of the subnets the Neuron node group may launch into (resolved through the
    network stack's exports)."""
    network = synth.templates["Network"]
    outputs = network.get("Outputs", {})
    zones = set()
    for subnet in _neuron_nodegroup(synth)["Subnets"]:
        # aws-cdk-lib references another stack's output with Fn::GetStackOutput (or, in older
        # releases, an export and Fn::ImportValue).
        if "Fn::GetStackOutput" in subnet:
            output = outputs[subnet["Fn::GetStackOutput"]["OutputName"]]
        else:
            (output,) = (o for o in outputs.values() if o.get("Export", {}).get("Name") == subnet)
        logical_id = output["Value"]["Ref"]
        zones.add(network["Resources"][logical_id]["Properties"]["AvailabilityZone"])
    return zones


def _neuron_launch_template(synth) -> dict:
    (template,) = synth.resources("Cluster", "AWS::EC2::LaunchTemplate").values()
    return template["Properties"]["LaunchTemplateData"]


def test_cluster_version_logging_encryption_and_private_endpoint(synth) -> None:
    settings = synth.config.cluster
    clusters = synth.resources("Cluster", "AWS::EKS::Cluster")
    assert len(clusters) == 1
    props = next(iter(clusters.values()))["Properties"]
    assert props["Name"] == settings.name
    assert props["Version"] == settings.kubernetes_version
    # The default stays in EKS standard support: 1.34's ends 2026-12-02.
    assert tuple(int(part) for part in props["Version"].split(".")) >= (1, 35)
    enabled = props["Logging"]["ClusterLogging"]["EnabledTypes"]
    assert sorted(t["Type"] for t in enabled) == sorted(settings.control_plane_log_types)
    assert props["EncryptionConfig"][0]["Resources"] == ["secrets"]
    assert "KeyArn" in props["EncryptionConfig"][0]["Provider"]
    vpc_config = props["ResourcesVpcConfig"]
    assert vpc_config["EndpointPrivateAccess"] is True
    assert vpc_config["EndpointPublicAccess"] is False
    # Managed node groups only: no Auto Mode compute.
    assert not props.get("ComputeConfig", {}).get("Enabled", False)


def test_public_endpoint_is_restricted_to_configured_cidrs(synth_options) -> None:
    props = next(iter(synth_options.resources("Cluster", "AWS::EKS::Cluster").values()))
    vpc_config = props["Properties"]["ResourcesVpcConfig"]
    assert vpc_config["EndpointPublicAccess"] is True
    assert vpc_config["PublicAccessCidrs"] == synth_options.config.cluster.public_access_cidrs


def test_admin_principal_gets_a_cluster_admin_access_entry(synth_options) -> None:
    arn = synth_options.config.cluster.admin_principal_arns[0]
    entries = [
        e["Properties"]
        for e in synth_options.resources("Cluster", "AWS::EKS::AccessEntry").values()
        if e["Properties"]["PrincipalArn"] == arn
    ]
    assert len(entries) == 1
    (policy,) = entries[0]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "policy/AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])


def test_trn2_node_group_uses_neuron_ami_launch_template_and_taint(synth) -> None:
    nodes = synth.config.cluster.neuron_nodes
    group = _neuron_nodegroup(synth)
    assert group["AmiType"] == "AL2023_x86_64_NEURON"
    assert "InstanceTypes" not in group  # the type lives in the launch template
    assert group["CapacityType"] == "ON_DEMAND"
    assert group["Taints"] == [{"Key": NEURON_TAINT_KEY, "Effect": "NO_SCHEDULE"}]
    assert group["ScalingConfig"]["MinSize"] == 0  # scalable to zero
    assert group["ScalingConfig"]["MaxSize"] == nodes.max_size
    templates = synth.resources("Cluster", "AWS::EC2::LaunchTemplate")
    assert len(templates) == 1
    data = next(iter(templates.values()))["Properties"]["LaunchTemplateData"]
    assert data["InstanceType"] == nodes.instance_type == "trn2.48xlarge"
    assert data["MetadataOptions"]["HttpPutResponseHopLimit"] == 2
    assert data["MetadataOptions"]["HttpTokens"] == "required"
    root = data["BlockDeviceMappings"][0]["Ebs"]
    assert root["VolumeSize"] == nodes.root_volume_gib
    assert root["Encrypted"] is True
    assert "NetworkInterfaces" not in data and "Placement" not in data
    assert "InstanceMarketOptions" not in data and "CapacityReservationSpecification" not in data
    # No reservation: the group may use every AZ of the network.
    assert _neuron_subnet_azs(synth) == set(synth.config.network.availability_zones)


def test_capacity_block_efa_and_placement_group(synth_options) -> None:
    nodes = synth_options.config.cluster.neuron_nodes
    group = _neuron_nodegroup(synth_options)
    assert group["CapacityType"] == "CAPACITY_BLOCK"
    data = next(iter(synth_options.resources("Cluster", "AWS::EC2::LaunchTemplate").values()))[
        "Properties"
    ]["LaunchTemplateData"]
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target["CapacityReservationId"] == nodes.capacity_reservation_id
    assert data["InstanceMarketOptions"] == {"MarketType": CAPACITY_BLOCK_MARKET_TYPE}
    assert _neuron_subnet_azs(synth_options) == {nodes.availability_zone} == {"us-east-2b"}
    interfaces = data["NetworkInterfaces"]
    assert len(interfaces) == nodes.efa_interfaces == 16
    assert interfaces[0]["InterfaceType"] == "efa" and interfaces[0]["DeviceIndex"] == 0
    assert {i["NetworkCardIndex"] for i in interfaces} == set(range(16))
    assert "GroupName" in data["Placement"]
    assert len(synth_options.resources("Cluster", "AWS::EC2::PlacementGroup")) == 1


def test_reservation_targets_the_odcr_in_its_az_without_a_market_type(synth_reservation) -> None:
    nodes = synth_reservation.config.cluster.neuron_nodes
    assert _neuron_nodegroup(synth_reservation)["CapacityType"] == "ON_DEMAND"
    data = _neuron_launch_template(synth_reservation)
    target = data["CapacityReservationSpecification"]["CapacityReservationTarget"]
    assert target["CapacityReservationId"] == nodes.capacity_reservation_id
    assert "InstanceMarketOptions" not in data  # capacity-block market type is for blocks only
    assert _neuron_subnet_azs(synth_reservation) == {nodes.availability_zone} == {"us-east-2c"}


def test_system_node_group_is_untainted_and_sized_from_config(synth) -> None:
    nodes = synth.config.cluster.system_nodes
    groups = synth.resources("Cluster", "AWS::EKS::Nodegroup").values()
    system = [g["Properties"] for g in groups if not g["Properties"].get("Taints")]
    assert len(system) == 1
    assert system[0]["InstanceTypes"] == [nodes.instance_type]
    assert system[0]["ScalingConfig"] == {
        "MinSize": nodes.min_size,
        "MaxSize": nodes.max_size,
        "DesiredSize": nodes.desired_size,
    }


def test_addons_and_pod_identity_associations(synth) -> None:
    addons = {
        a["Properties"]["AddonName"]: a
        for a in synth.resources("Cluster", "AWS::EKS::Addon").values()
    }
    assert set(addons) == {VPC_CNI, POD_IDENTITY_AGENT, S3_CSI_DRIVER, CLOUDWATCH_OBSERVABILITY}
    # NetworkPolicies are only enforced with the VPC CNI's network policy agent on; the
    # managed add-on takes over the self-managed vpc-cni EKS installs.
    vpc_cni = addons[VPC_CNI]["Properties"]
    assert json.loads(vpc_cni["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert vpc_cni["ResolveConflicts"] == "OVERWRITE"
    associations = {
        (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"])
        for a in synth.resources("Cluster", "AWS::EKS::PodIdentityAssociation").values()
    }
    assert associations == {
        (S3_CSI_NAMESPACE, S3_CSI_SERVICE_ACCOUNT),
        (CLOUDWATCH_NAMESPACE, CLOUDWATCH_SERVICE_ACCOUNT),
        (synth.config.serving.namespace, synth.config.loadtest.service_account),
        # Not the Argo Rollouts controller: IRSA (tests/stacks/test_controller_credentials.py).
        (synth.config.serving.namespace, synth.config.model_store.import_service_account),
    }
    csi_config = json.loads(addons[S3_CSI_DRIVER]["Properties"]["ConfigurationValues"])
    assert {"key": NEURON_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"} in csi_config[
        "node"
    ]["tolerations"]


def test_dra_driver_chart_has_the_device_plugin_disabled(synth) -> None:
    settings = synth.config.cluster
    charts = [
        chart
        for chart in synth.resources("Cluster", "Custom::AWSCDK-EKS-HelmChart").values()
        if chart["Properties"]["Release"] == RELEASE
    ]
    assert len(charts) == 1
    props = charts[0]["Properties"]
    assert props["Repository"] == settings.neuron_helm_chart
    assert props["Version"] == settings.neuron_helm_chart_version
    assert props["Version"] == "1.10.0"  # a documented DRA-capable release
    assert props["Namespace"] == settings.neuron_namespace == "neuron-dra-driver"
    assert props.get("CreateNamespace") is not True  # pre-created below, adoptable by Helm
    values = json.loads(props["Values"])
    assert values == dra_helm_values(settings)
    assert values["devicePlugin"]["enabled"] is False
    assert values["npd"]["enabled"] is False
    assert values["scheduler"]["enabled"] is False
    assert values["draDriver"] == {"enabled": True, "namespaceOverride": settings.neuron_namespace}


def test_dra_driver_namespace_exists_before_the_chart_and_helm_can_adopt_it(synth) -> None:
    settings = synth.config.cluster
    resources = synth.templates["Cluster"]["Resources"]
    helm_id, helm = next(
        (k, r)
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Release"] == RELEASE
    )
    namespaces = {
        logical_id: obj
        for logical_id, resource in resources.items()
        if resource["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        for obj in decode_manifest(resource["Properties"]["Manifest"])
        if obj["kind"] == "Namespace" and obj["metadata"]["name"] == settings.neuron_namespace
    }
    assert len(namespaces) == 1
    ((logical_id, namespace),) = namespaces.items()
    assert logical_id in helm.get("DependsOn", [])
    assert resources[logical_id]["Properties"].get("Overwrite") is True
    # The chart renders this Namespace itself; Helm adopts an existing object only with
    # exactly this ownership metadata (helm pkg/action/validate.go, checkOwnership).
    metadata = namespace["metadata"]
    assert metadata["labels"]["app.kubernetes.io/managed-by"] == "Helm"
    assert helm["Properties"]["Release"] == RELEASE
    assert metadata["annotations"] == {
        "meta.helm.sh/release-name": RELEASE,
        "meta.helm.sh/release-namespace": helm["Properties"]["Namespace"],
    }
    assert helm_id not in resources[logical_id].get("DependsOn", [])


def test_every_log_group_is_encrypted_with_the_logs_key(synth, synth_options) -> None:
    for result in (synth, synth_options):
        groups = {
            (stack, logical_id): group
            for stack in result.templates
            for logical_id, group in result.resources(stack, "AWS::Logs::LogGroup").items()
        }
        assert len(groups) >= 3  # flow logs + the kubectl provider's two handlers
        for where, group in groups.items():
            assert "KmsKeyId" in group["Properties"], where


def test_no_neuron_device_plugin_anywhere(synth, synth_options) -> None:
    for result in (synth, synth_options):
        for obj in result.manifests():
            name = obj.get("metadata", {}).get("name", "")
            assert not (obj.get("kind") == "DaemonSet" and "neuron-device-plugin" in name), obj
        for stack, template in result.templates.items():
            assert "neuron-device-plugin" not in json.dumps(template), stack


def test_charts_apply_after_addons_and_the_dra_driver(synth) -> None:
    resources = synth.templates["Cluster"]["Resources"]
    charts = {
        k: r
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource"
        # the DRA driver's own namespace goes before the driver, not after it
        and not k.startswith("ClusterNeuronDraNamespace")
    }
    assert charts, "the experiment charts are applied by the cluster stack"
    helm = next(
        k
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-HelmChart" and r["Properties"]["Release"] == RELEASE
    )
    addons = [k for k, r in resources.items() if r["Type"] == "AWS::EKS::Addon"]
    for logical_id, chart in charts.items():
        depends = set(chart.get("DependsOn", []))
        assert helm in depends, logical_id
        assert set(addons) <= depends, logical_id


def test_no_s3_star_and_no_full_access_policies(synth, synth_options) -> None:
    for result in (synth, synth_options):
        for stack, template in result.templates.items():
            for logical_id, resource in template["Resources"].items():
                props = resource.get("Properties", {})
                documents = [props.get("PolicyDocument")] + [
                    p.get("PolicyDocument") for p in props.get("Policies", [])
                ]
                for document in filter(None, documents):
                    for statement in document["Statement"]:
                        if statement["Effect"] != "Allow":
                            continue  # e.g. the TLS-only Deny on s3:*
                        actions = statement.get("Action", [])
                        actions = [actions] if isinstance(actions, str) else actions
                        assert "s3:*" not in actions and "*" not in actions, (stack, logical_id)
                managed = json.dumps(props.get("ManagedPolicyArns", []))
                assert "FullAccess" not in managed, (stack, logical_id)


def _policy_statements(synth, logical_prefix: str) -> list[dict]:
    policies = {
        k: p
        for k, p in synth.resources("ModelStore", "AWS::IAM::Policy").items()
        if k.startswith(logical_prefix)
    }
    assert len(policies) == 1, logical_prefix
    return next(iter(policies.values()))["Properties"]["PolicyDocument"]["Statement"]


def _object_pattern(resource) -> str:
    """``<bucket ARN>/<pattern>`` (a Fn::Join) -> the pattern's text; anything else as JSON."""
    if isinstance(resource, dict) and "Fn::Join" in resource:
        return resource["Fn::Join"][1][-1]
    return json.dumps(resource)


def _grants(statements: list[dict]) -> dict[str, list[str]]:
    """action -> the object patterns (or other resources, as JSON) it is allowed on."""
    grants: dict[str, list[str]] = {}
    for statement in statements:
        actions = statement["Action"]
        for action in [actions] if isinstance(actions, str) else actions:
            grants.setdefault(action, []).append(_object_pattern(statement["Resource"]))
    return grants


def test_model_store_role_reads_the_bucket_and_writes_only_compiled(synth) -> None:
    grants = _grants(_policy_statements(synth, "MountpointAccess"))
    assert sorted(grants) == sorted(
        [
            "s3:ListBucket",
            "s3:GetObject",
            "s3:PutObject",
            "s3:AbortMultipartUpload",
            "s3:DeleteObject",
            "kms:Decrypt",
            "kms:GenerateDataKey",
        ]
    )
    assert grants["s3:GetObject"] == ["/*"]  # every object of the one bucket
    compiled = f"/{synth.config.model_store.compiled_prefix}/*"
    for action in ("s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"):
        assert grants[action] == [compiled], action
    for resources in grants.values():
        assert '"*"' not in resources


def test_model_import_role_lists_reads_and_writes_only_checkpoints(synth) -> None:
    statements = _policy_statements(synth, "ModelImportAccess")
    grants = _grants(statements)
    checkpoints = f"{synth.config.model_store.checkpoints_prefix}/*"
    for action in ("s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"):
        assert grants[action] == [f"/{checkpoints}"], action
    (listing,) = [s for s in statements if s["Action"] == "s3:ListBucket"]
    assert listing["Condition"] == {"StringLike": {"s3:prefix": [checkpoints]}}
    assert sorted(grants) == sorted(
        ["s3:ListBucket", "s3:GetObject", "s3:PutObject", "s3:AbortMultipartUpload",
         "s3:DeleteObject", "kms:Decrypt", "kms:GenerateDataKey"]
    )  # fmt: skip
    roles = synth.resources("ModelStore", "AWS::IAM::Role")
    trust = [
        r["Properties"]["AssumeRolePolicyDocument"]["Statement"]
        for k, r in roles.items()
        if k.startswith("ModelImportRole")
    ]
    assert len(trust) == 1
    assert {p for s in trust[0] for p in [s["Principal"]["Service"]]} == {"pods.eks.amazonaws.com"}


def test_the_import_job_applies_after_its_pod_identity_association(synth) -> None:
    resources = synth.templates["Cluster"]["Resources"]
    (association,) = [
        k
        for k, r in resources.items()
        if r["Type"] == "AWS::EKS::PodIdentityAssociation"
        and r["Properties"]["ServiceAccount"] == synth.config.model_store.import_service_account
    ]
    serving = [
        r
        for k, r in resources.items()
        if r["Type"] == "Custom::AWSCDK-EKS-KubernetesResource" and "serving" in k.lower()
    ]
    assert serving and all(association in r.get("DependsOn", []) for r in serving)


def test_loadtest_role_can_only_put_metrics_in_its_namespace(synth) -> None:
    template = _template(synth, "Cluster")
    template.has_resource_properties(
        "AWS::IAM::Policy",
        {
            "PolicyDocument": {
                "Statement": [
                    {
                        "Action": "cloudwatch:PutMetricData",
                        "Effect": "Allow",
                        "Resource": "*",
                        "Condition": {
                            "StringEquals": {
                                "cloudwatch:namespace": synth.config.loadtest.metric_namespace
                            }
                        },
                    }
                ],
                "Version": "2012-10-17",
            }
        },
    )


def test_a_traffic_file_lets_the_load_test_read_that_one_object_and_decrypt_it_via_s3(
    synth_options,
) -> None:
    key = synth_options.config.loadtest.traffic.bucket_key()
    assert key == "loadtest-traffic/traffic.jsonl"
    template = json.loads(json.dumps(synth_options.templates["Cluster"]))
    role = next(
        k
        for k, r in template["Resources"].items()
        if r["Type"] == "AWS::IAM::Role" and k.startswith("LoadTestRole")
    )
    statements = [
        s
        for r in template["Resources"].values()
        if r["Type"] == "AWS::IAM::Policy" and {"Ref": role} in r["Properties"]["Roles"]
        for s in r["Properties"]["PolicyDocument"]["Statement"]
    ]
    assert sorted(s["Action"] for s in statements) == [
        "cloudwatch:PutMetricData",
        "kms:Decrypt",
        "s3:GetObject",
    ]
    read = next(s for s in statements if s["Action"] == "s3:GetObject")
    # arn:<partition>:s3:::<the model bucket>/<that key>: one object, no wildcard.
    parts = read["Resource"]["Fn::Join"][1]
    assert parts[-1] == f"/{key}" and "*" not in json.dumps(read)
    assert "model-store" in json.dumps(parts)  # the model-store stack's bucket name
    decrypt = next(s for s in statements if s["Action"] == "kms:Decrypt")
    assert decrypt["Condition"] == {
        "StringEquals": {"kms:ViaService": f"s3.{synth_options.config.region}.amazonaws.com"}
    }
    assert "model-store" in json.dumps(decrypt["Resource"])  # the model-store key only


def test_model_bucket_is_encrypted_private_versioned_tls_only(synth) -> None:
    template = _template(synth, "ModelStore")
    template.has_resource_properties(
        "AWS::S3::Bucket",
        {
            "BucketEncryption": {
                "ServerSideEncryptionConfiguration": [
                    Match.object_like(
                        {
                            "ServerSideEncryptionByDefault": Match.object_like(
                                {"SSEAlgorithm": "aws:kms"}
                            )
                        }
                    )
                ]
            },
            "VersioningConfiguration": {"Status": "Enabled"},
            "PublicAccessBlockConfiguration": {
                "BlockPublicAcls": True,
                "BlockPublicPolicy": True,
                "IgnorePublicAcls": True,
                "RestrictPublicBuckets": True,
            },
        },
    )
    template.has_resource_properties(
        "AWS::S3::BucketPolicy",
        {
            "PolicyDocument": {
                "Statement": Match.array_with(
                    [
                        Match.object_like(
                            {
                                "Effect": "Deny",
                                "Condition": {"Bool": {"aws:SecureTransport": "false"}},
                            }
                        )
                    ]
                )
            }
        },
    )
    buckets = synth.resources("ModelStore", "AWS::S3::Bucket").values()
    assert all(b["DeletionPolicy"] == "Retain" for b in buckets)  # retain_on_delete default


def test_vpc_spans_the_configured_azs_with_s3_endpoint_and_flow_logs(synth) -> None:
    network = synth.config.network
    subnets = synth.resources("Network", "AWS::EC2::Subnet").values()
    assert {s["Properties"]["AvailabilityZone"] for s in subnets} == set(network.availability_zones)
    template = _template(synth, "Network")
    template.has_resource_properties("AWS::EC2::VPC", {"CidrBlock": network.vpc_cidr})
    template.has_resource_properties(
        "AWS::EC2::VPCEndpoint",
        {"VpcEndpointType": "Gateway", "ServiceName": Match.object_like({})},
    )
    template.has_resource_properties("AWS::EC2::FlowLog", {"TrafficType": "ALL"})
    template.has_resource_properties(
        "AWS::Logs::LogGroup", {"RetentionInDays": network.flow_logs_retention_days}
    )
    template.resource_count_is("AWS::EC2::NatGateway", network.nat_gateways)


def test_explicit_account_needs_no_context_lookup(synth_options) -> None:
    manifest = json.loads((synth_options.outdir / "manifest.json").read_text())
    assert not manifest.get("missing"), manifest.get("missing")


def test_loadtest_image_context_holds_only_what_the_load_test_needs(synth) -> None:
    assets = json.loads((synth.outdir / "Cluster.assets.json").read_text())
    (image,) = assets["dockerImages"].values()
    assert image["source"]["dockerFile"] == f"{synth.config.loadtest.image_directory}/Dockerfile"
    context = synth.outdir / image["source"]["directory"]
    assert sorted(p.name for p in context.iterdir()) == sorted(LOADTEST_CONTEXT_INCLUDES)
    assert not list(context.rglob("__pycache__"))


def test_pushgateway_admits_scrapes_from_the_private_subnets_only(synth) -> None:
    """The managed collector's interfaces are in the private subnets: their CIDRs, from the
    Network stack, are the Pushgateway's only address-range peers (charts/probe.py)."""
    private = sorted(
        s["Properties"]["CidrBlock"]
        for s in synth.resources("Network", "AWS::EC2::Subnet").values()
        if not s["Properties"].get("MapPublicIpOnLaunch")
    )
    assert len(private) == len(synth.config.network.availability_zones)
    [policy] = [
        o for o in synth.manifests()
        if o["kind"] == "NetworkPolicy" and o["metadata"]["name"].endswith("-pushgateway-ingress")
    ]  # fmt: skip
    blocks = sorted(
        peer["ipBlock"]["cidr"]
        for rule in policy["spec"]["ingress"]
        for peer in rule["from"]
        if "ipBlock" in peer
    )
    assert blocks == private
