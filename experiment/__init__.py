"""The experiment's single typed configuration and how it is loaded."""

from experiment.config import Arm, ExperimentConfig
from experiment.loading import ConfigError, build_config

__all__ = ["Arm", "ConfigError", "ExperimentConfig", "build_config"]
