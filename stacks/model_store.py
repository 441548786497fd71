"""S3 model store: Hugging Face checkpoints and compiled Neuron artifacts.

Encrypted with a customer-managed KMS key, public access blocked, TLS enforced, versioned,
server access logs on. Two Pod Identity roles, defined here next to the bucket they may touch,
are the only principals granted access:
- the Mountpoint CSI driver's (associated in ``addons.py``): reads the whole bucket, writes only
  under ``compiled/`` (the precompile init containers publish there);
- the model-import Job's (associated in ``cluster.py``; its volume uses pod-level credentials,
  ``charts/model_import_job.py``): lists, reads and writes only under ``checkpoints/``.
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_s3 as s3
from constructs import Construct

from experiment import ExperimentConfig
from stacks.checkov import acknowledge_checkov
from stacks.nag import acknowledge
from stacks.pod_identity import pod_identity_role


class ModelStoreStack(cdk.Stack):
    def __init__(
        self, scope: Construct, construct_id: str, *, config: ExperimentConfig, **kwargs
    ) -> None:
        super().__init__(scope, construct_id, **kwargs)
        self.config = config
        store = config.model_store
        removal = cdk.RemovalPolicy.RETAIN if store.retain_on_delete else cdk.RemovalPolicy.DESTROY
        # Objects are only deleted with the bucket when the user chose not to retain it.
        auto_delete = not store.retain_on_delete

        self.key = kms.Key(
            self,
            "Key",
            description=f"{config.project}: model store (checkpoints, compiled Neuron artifacts)",
            enable_key_rotation=True,
            removal_policy=removal,
        )
        access_logs = s3.Bucket(
            self,
            "AccessLogs",
            # S3 server access logging only delivers to SSE-S3 buckets.
            encryption=s3.BucketEncryption.S3_MANAGED,
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            lifecycle_rules=[s3.LifecycleRule(expiration=cdk.Duration.days(365))],
            removal_policy=removal,
            auto_delete_objects=auto_delete,
        )
        acknowledge(
            access_logs,
            "AwsSolutions-S1",
            "This bucket is the access-log destination; logging it into itself would loop.",
        )
        access_logs_bucket: s3.CfnBucket = access_logs.node.default_child  # type: ignore[assignment]
        acknowledge_checkov(
            access_logs_bucket,
            "CKV_AWS_18",
            "This bucket is the access-log destination; logging it into itself would loop",
        )
        acknowledge_checkov(
            access_logs_bucket,
            "CKV_AWS_21",
            "S3 server access logging writes each log object once under a new key; versioning "
            "would only keep deleted logs past the bucket's 365-day expiry",
        )
        self.bucket = s3.Bucket(
            self,
            "Bucket",
            bucket_name=store.bucket_name,
            encryption=s3.BucketEncryption.KMS,
            encryption_key=self.key,
            bucket_key_enabled=True,  # fewer KMS calls while Mountpoint streams large files
            block_public_access=s3.BlockPublicAccess.BLOCK_ALL,
            enforce_ssl=True,
            versioned=True,
            object_ownership=s3.ObjectOwnership.BUCKET_OWNER_ENFORCED,
            server_access_logs_bucket=access_logs,
            server_access_logs_prefix="model-store/",
            lifecycle_rules=[
                s3.LifecycleRule(
                    noncurrent_version_expiration=cdk.Duration.days(
                        store.noncurrent_version_expiration_days
                    ),
                    abort_incomplete_multipart_upload_after=cdk.Duration.days(7),
                )
            ],
            removal_policy=removal,
            auto_delete_objects=auto_delete,
        )
        self.mountpoint_role = pod_identity_role(
            self, "MountpointRole", "Mountpoint for S3 CSI driver: the model bucket only"
        )
        self._grant_mountpoint(self.mountpoint_role)
        self.model_import_role: iam.Role | None = None
        if store.import_checkpoints:
            self.model_import_role = pod_identity_role(
                self, "ModelImportRole", "Model import Job: write checkpoints/ of the model bucket"
            )
            self._grant_model_import(self.model_import_role, store.checkpoints_prefix)
        cdk.CfnOutput(self, "BucketName", value=self.bucket.bucket_name)

    def _objects_finding(self, pattern: str) -> str:
        """How cdk-nag names a wildcard on this bucket's objects (``pattern`` after the ARN)."""
        bucket_logical_id = self.get_logical_id(self.bucket.node.default_child)  # type: ignore[arg-type]
        return f"AwsSolutions-IAM5[Resource::<{bucket_logical_id}.Arn>/{pattern}]"

    def _grant_mountpoint(self, role: iam.Role) -> None:
        # What Mountpoint needs (its documented policy: list, read, write, resume, delete; KMS),
        # writes narrowed to compiled/: checkpoints come from the import Job's own role.
        compiled = self.config.model_store.compiled_prefix
        policy = iam.Policy(
            self,
            "MountpointAccess",
            statements=[
                iam.PolicyStatement(actions=["s3:ListBucket"], resources=[self.bucket.bucket_arn]),
                iam.PolicyStatement(
                    actions=["s3:GetObject"], resources=[self.bucket.arn_for_objects("*")]
                ),
                iam.PolicyStatement(
                    actions=["s3:PutObject", "s3:AbortMultipartUpload", "s3:DeleteObject"],
                    resources=[self.bucket.arn_for_objects(f"{compiled}/*")],
                ),
                iam.PolicyStatement(
                    actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[self.key.key_arn]
                ),
            ],
        )
        role.attach_inline_policy(policy)
        acknowledge(
            policy,
            self._objects_finding("*"),
            "Reads of the one model bucket: serving and precompile read checkpoints and "
            "compiled artifacts under any key of that bucket, and nowhere else.",
        )
        acknowledge(
            policy,
            self._objects_finding(f"{compiled}/*"),
            "Writes only under compiled/ of the model bucket, where the precompile init "
            "containers publish artifacts under per-arm keys not known in advance.",
        )

    def _grant_model_import(self, role: iam.Role, prefix: str) -> None:
        # Mountpoint with the Job's own credentials, confined to the checkpoints/ prefix: it
        # lists only there (--prefix), reads back, writes, resumes and replaces files there.
        policy = iam.Policy(
            self,
            "ModelImportAccess",
            statements=[
                iam.PolicyStatement(
                    actions=["s3:ListBucket"],
                    resources=[self.bucket.bucket_arn],
                    conditions={"StringLike": {"s3:prefix": [f"{prefix}/*"]}},
                ),
                iam.PolicyStatement(
                    actions=[
                        "s3:GetObject",
                        "s3:PutObject",
                        "s3:AbortMultipartUpload",
                        "s3:DeleteObject",
                    ],
                    resources=[self.bucket.arn_for_objects(f"{prefix}/*")],
                ),
                iam.PolicyStatement(
                    actions=["kms:Decrypt", "kms:GenerateDataKey"], resources=[self.key.key_arn]
                ),
            ],
        )
        role.attach_inline_policy(policy)
        acknowledge(
            policy,
            self._objects_finding(f"{prefix}/*"),
            "The import writes each model's files under checkpoints/<model id>/ of the one "
            "model bucket; file names come from the hub, so the keys are not known in advance.",
        )
