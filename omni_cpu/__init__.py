"""omni-cpu: plan, validate and run vLLM-Omni speech pipelines on CPU servers.

The data path is one direction: hardware facts -> plan -> launch.
"""

__version__ = "0.1.0"
