"""A release with ``deploy-demo`` v1 and v2: old tasks finish on v1, new ones start on v2."""

from __future__ import annotations

from tests.support.deploy_skills_v1 import SKILLS as V1
from tests.support.deploy_skills_v2 import SKILLS as V2

SKILLS = [*V1, *V2]
