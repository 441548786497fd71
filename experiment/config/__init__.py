"""The one typed configuration of the experiment, one module per section.

Every name, model, port, size and count used by ``stacks/``, ``charts/``,
``runtime/``, ``loadtest/`` and ``local_run/`` comes from here. Defaults
reproduce the published experiment (Qwen3-32B target, Qwen3-1.7B draft, k=7,
trn2.48xlarge, TP 32, LNC 2). Validation lives here too, so a bad value is
rejected when the app is synthesized, before anything is deployed. Every field's
description is in docs/config.md (``python -m experiment.reference`` writes it).
"""

from experiment.config.base import (
    TIERED_ARM,
    Arm,
    NamespaceName,
    ServiceAccountName,
    ServiceName,
)
from experiment.config.cluster import (
    CONNECTED_DEVICE_GROUP_SIZES,
    MIN_KUBERNETES_VERSION,
    NEURON_INSTANCE_TYPES,
    CapacityType,
    ClusterConfig,
    EndpointAccess,
    NeuronNodeGroupConfig,
    NodeGroupConfig,
    SystemNodeGroupConfig,
)
from experiment.config.experiment import ExperimentConfig
from experiment.config.gateway_plugin import GATEWAY_API_PLUGIN_URL, plugin_sha256
from experiment.config.generator import (
    CPU_ATTENTION_HEAD_SIZES,
    DEFAULT_DRAFTS,
    DistillationConfig,
    DraftShape,
    ModelGeneratorConfig,
    TargetPadding,
    TargetShape,
    TinyModelShape,
)
from experiment.config.guardrails import GuardrailConfig
from experiment.config.loadtest import (
    ArmsMode,
    LoadTestConfig,
    LoadTestPodConfig,
    PromptSuiteConfig,
    SloConfig,
)
from experiment.config.local import LocalConfig
from experiment.config.metric_names import MetricNames
from experiment.config.model_store import ModelStoreConfig
from experiment.config.network import LOG_RETENTION_DAYS, NetworkConfig
from experiment.config.pricing import (
    NOMINAL_NEURON_SOURCE,
    NOMINAL_NEURON_USD_PER_HOUR,
    InstancePrice,
    LocalPrice,
    PricingConfig,
)
from experiment.config.profiles import (
    FORK_IMAGE,
    PLUGIN_DRAFT,
    PLUGIN_IMAGE,
    PROFILES,
    ProfileDefaults,
    ServingProfile,
)
from experiment.config.routing import FallbackConfig, HealthConfig, RoutingConfig
from experiment.config.routing_line import routing_override_line
from experiment.config.serving import SecurityProfile, ServingConfig
from experiment.config.stats import StatisticsConfig
from experiment.config.traffic import TrafficConfig
from experiment.config.tuning import TuningConfig

__all__ = [
    "CONNECTED_DEVICE_GROUP_SIZES",
    "CPU_ATTENTION_HEAD_SIZES",
    "DEFAULT_DRAFTS",
    "FORK_IMAGE",
    "GATEWAY_API_PLUGIN_URL",
    "LOG_RETENTION_DAYS",
    "MIN_KUBERNETES_VERSION",
    "NEURON_INSTANCE_TYPES",
    "NOMINAL_NEURON_SOURCE",
    "NOMINAL_NEURON_USD_PER_HOUR",
    "PLUGIN_DRAFT",
    "PLUGIN_IMAGE",
    "PROFILES",
    "TIERED_ARM",
    "Arm",
    "ArmsMode",
    "CapacityType",
    "ClusterConfig",
    "DistillationConfig",
    "DraftShape",
    "EndpointAccess",
    "ExperimentConfig",
    "FallbackConfig",
    "GuardrailConfig",
    "HealthConfig",
    "InstancePrice",
    "LoadTestConfig",
    "LoadTestPodConfig",
    "LocalConfig",
    "LocalPrice",
    "MetricNames",
    "ModelGeneratorConfig",
    "ModelStoreConfig",
    "NamespaceName",
    "NetworkConfig",
    "NeuronNodeGroupConfig",
    "NodeGroupConfig",
    "PricingConfig",
    "ProfileDefaults",
    "PromptSuiteConfig",
    "RoutingConfig",
    "SecurityProfile",
    "ServiceAccountName",
    "ServiceName",
    "ServingConfig",
    "ServingProfile",
    "SloConfig",
    "StatisticsConfig",
    "SystemNodeGroupConfig",
    "TargetPadding",
    "TargetShape",
    "TinyModelShape",
    "TrafficConfig",
    "TuningConfig",
    "plugin_sha256",
    "routing_override_line",
]
