from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# Property tests compare against exact models; keep them deterministic in CI and
# bounded on a 2-core machine.
settings.register_profile(
    "default",
    max_examples=int(os.environ.get("SLUICEGATE_HYPOTHESIS_EXAMPLES", "150")),
    deadline=None,
    derandomize=bool(os.environ.get("CI")),
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile("default")
