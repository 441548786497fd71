"""Turns a serving spec into the vLLM command line (Neuron fork, Neuron plugin, local CPU)."""
